"""Control from outside a run: pause, resume, stop, inject and wake, from a handle or the log.

_control_requests.py  RunControls: the inputs from outside, written into the run's state
_inbox.py         the inbox, the wake signal, and the one builder of an inject event
_remote.py        send_inject / send_control: control a session through its event log
_session_state.py a session's state from outside a run: completed, stopped, the horizon
"""
