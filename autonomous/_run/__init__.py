"""The run: entry points, a run's lifecycle, the turn loop, one turn, and the pure decisions.

_driver.py        run_autonomous, start_autonomous, resume_autonomous (the entry points)
_handle.py        AutonomousHandle
_run.py           one run's lifecycle: build, session, lease, resume, exits, checkpoints
_loop.py          the turn loop: awaits the turn, asks next_step, carries out its answer
_turn.py          one turn: model calls and tool calls, budgets between model calls;
                  returns a TurnOutcome
_decide.py        the loop's decisions as pure functions (next_step, budgets, wake clamp)
_summary.py       summaries of the turns the history window cuts (history_summary_model)
_tool_table.py    ToolTable: a run's tools when MCP servers add to the agent's own
"""
