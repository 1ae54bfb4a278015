//! Feature modules: each one holds its runtime and its directives.

pub mod log;
pub mod static_files;
