//! Configuration: nginx-grammar lexer and parser, directive table, resolved model.

pub mod ast;
pub mod lexer;
pub mod parser;
