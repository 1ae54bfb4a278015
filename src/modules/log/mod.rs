//! Access log: log_format and access_log.
