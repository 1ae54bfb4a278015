//! Configuration: nginx-grammar lexer and parser, directive table, resolved model.

pub mod ast;
pub mod core_directives;
pub mod lexer;
pub mod load;
pub mod model;
pub mod parser;
pub mod table;
pub mod values;
