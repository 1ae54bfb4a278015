//! `error_page` and `recursive_error_pages`: when a response vireo generated
//! (an error or redirect made through `Request::error`) has a status with a
//! page, the request is redirected internally (as a GET) to that page, to a
//! named location, or answered with a redirect. The pipeline applies it in
//! `core::request`; this module holds the directives and their data.

pub mod conf;
