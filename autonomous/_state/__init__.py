"""The run's state, folded from its log: the conversation and the run's one value.

_history.py       History: the conversation as one fold of events (live and on resume);
                  the window (cut in blocks, window_start); OpenTurn
_conversation.py  the run's conversation: the events it records, applied to its History
_run_state.py     RunState: the run's state as one value (totals, lifecycle, next prompt),
                  to and from checkpoints; its status is derived
"""
