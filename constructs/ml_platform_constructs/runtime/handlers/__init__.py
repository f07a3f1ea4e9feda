"""The platform's Lambda functions, each a module with a ``handler``, and the state they share (pending jobs)."""
