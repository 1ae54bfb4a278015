//! Server: listeners, workers, signals.
