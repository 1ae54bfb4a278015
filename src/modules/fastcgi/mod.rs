//! FastCGI gateway (to php-fpm and other FastCGI applications): the record
//! codec, the CGI response-head parser it shares with the CGI handler, the
//! `fastcgi_pass` handler and its directives. See docs/fastcgi.md.

pub mod cgi_head;
pub mod conf;
pub mod handler;
pub mod record;
pub mod respond;

pub use handler::script_name;
