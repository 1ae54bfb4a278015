//! FastCGI gateway (to php-fpm and other FastCGI applications): the record
//! codec and the CGI response-head parser it shares with the CGI handler.

pub mod cgi_head;
pub mod record;
