//! Small syscall shims; the only place for `unsafe`.
