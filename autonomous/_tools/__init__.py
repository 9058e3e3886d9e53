"""Tools: what a model may call, their schemas, arguments and results, and the exit tools.

_tools.py         Tool, function_tool, argument parsing, call contexts (idempotency keys)
_schema.py        JSON schemas from type hints, through pydantic (openai_schema)
_tool_result.py   ToolOutcome, and a tool call's value or error as the text the model reads
_exit_tools.py    the exit tools: the done tool and the schedule tool, returning signals
"""
