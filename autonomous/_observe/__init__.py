"""Observing a run: one observer fans each event out to logs, telemetry, supervisors, readers.

_observer.py      one observer per run: each event once (emit), and the commit rule
_telemetry.py     OpenTelemetry GenAI spans, histograms and counters (optional); trace_context
_genai_content.py messages and tool content as the GenAI conventions shape them (opt-in)
_supervisor.py    supervisors: decisions, rules, the snapshot they see
_judge.py         the LLM judge, a supervisor that asks a model
"""
