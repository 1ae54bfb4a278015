//! Directives of the core: process, events, http blocks, servers, locations,
//! listening sockets and connection settings.

use super::ast::{ConfError, Directive};
use super::model::{
    HttpConf, Keepalive, Lingering, ListenAddr, ListenSpec, LocKind, LocationConf, ServerConf,
    SockOpts, StreamConf, StreamServerConf,
};
use super::table::{Arity, Ctx, Def, Env, MANY, ONE, Scope};
use super::values::{bad_arg, flag, number, parse_size, parse_time, set_once, size, time};
use crate::core::errlog::{DebugConnection, Dest, ErrorLog, Level};
use crate::core::mime::MimeTypes;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "worker_processes",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: ONE,
        set: |s, d, _| {
            let n = match d.arg(0) {
                "auto" => None,
                _ => Some(number(d, 0)?.max(1) as usize),
            };
            set_once(&mut s.main().worker_processes, n, d)
        },
        syntax: "worker_processes number | auto;",
        default: "1",
        doc: "Number of worker threads, each with its own event loop and listening sockets; `auto` is one per core.\n\n```nginx\nworker_processes auto;\n```",
    },
    Def {
        name: "worker_rlimit_nofile",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.main().worker_rlimit_nofile, number(d, 0)?, d),
        syntax: "worker_rlimit_nofile number;",
        default: "—",
        doc: "Raises the open-files limit (RLIMIT_NOFILE) at start-up; a warning is logged where the hard limit forbids it.\n\n```nginx\nworker_rlimit_nofile 65536;\n```",
    },
    Def {
        name: "pid",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: ONE,
        set: |s, d, e| {
            let p = e.path(d.arg(0));
            set_once(&mut s.main().pid, p, d)?;
            s.main().pid_at = Some(d.span.clone());
            Ok(())
        },
        syntax: "pid file;",
        default: "— (no pid file)",
        doc: "Writes the process id to this file at start-up and removes it on exit.\n\n```nginx\npid /run/vireo.pid;\n```",
    },
    Def {
        name: "error_log",
        ignored: false,
        ctx: Ctx::MAIN.or(Ctx::HSL).or(Ctx::SS),
        arity: Arity::args(1, 2),
        set: |s, d, e| {
            let level = match d.args.get(1) {
                Some(a) => Level::parse(&a.value).ok_or_else(|| bad_arg(d, &a.value))?,
                None => Level::Error,
            };
            let dest =
                Dest::parse(d.arg(0), |p| e.path(p)).map_err(|m| ConfError::new(m, &d.span))?;
            let loc = match s {
                Scope::Main(m) => {
                    m.error_log.push((dest, level));
                    m.error_log_at = Some(d.span.clone());
                    return Ok(());
                }
                s => s.loc(),
            };
            // Several at one level: all of them, opened again together.
            let mut dests = match &loc.core.error_log {
                Some(Some(have)) => have.dests().to_vec(),
                _ => Vec::new(),
            };
            dests.push((dest, level));
            let log = ErrorLog::open(&dests).map_err(|m| ConfError::new(m, &d.span))?;
            loc.core.error_log = Some(Some(log.scoped()));
            Ok(())
        },
        syntax: "error_log file | stderr | syslog:server=address[,parameter=value] [debug | info | notice | warn | error | crit | alert | emerg];",
        default: "stderr error",
        doc: "Where error and notice messages go, and the least severe level written; several may be given at one level, each gets the messages at or above its level. The main level's take what happens outside requests; an http, server or location level's take its requests' messages (inherited by the levels below that name none). `syslog:` sends each message as a datagram: `server=` an address (port 514 by default) or `unix:` path, `facility=` (`local7`), `tag=` (`nginx`), `nohostname`.\n\n```nginx\nerror_log logs/error.log warn;\nerror_log syslog:server=127.0.0.1:514,facility=local7,tag=vireo info;\nlocation /api { error_log logs/api.error.log info; }\n```",
    },
    Def {
        name: "debug_connection",
        ignored: false,
        ctx: Ctx::EVENTS,
        arity: ONE,
        set: |s, d, _| {
            let c = DebugConnection::parse(d.arg(0)).ok_or_else(|| bad_arg(d, d.arg(0)))?;
            s.main().debug_connection.push(c);
            Ok(())
        },
        syntax: "debug_connection address | CIDR | unix:;",
        default: "—",
        doc: "Requests from these clients (an address, a network, or `unix:` for Unix socket clients) log their debug messages, and every message, to each error log whatever its level.\n\n```nginx\nevents { debug_connection 192.168.1.0/24; debug_connection ::1; }\n```",
    },
    Def {
        name: "daemon",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.main().daemon, flag(d, 0)?, d),
        syntax: "daemon on | off;",
        default: "off",
        doc: "`on`: detach from the terminal after binding (fork, new session, standard streams to /dev/null); the pid file then holds the detached process. Skipped when started by a binary upgrade. Under a service manager, leave it off.\n\n```nginx\ndaemon off;\n```",
    },
    Def {
        name: "include",
        ignored: false,
        ctx: Ctx(0xffff),
        arity: ONE,
        set: |_, _, _| Ok(()),
        syntax: "include file | mask;",
        default: "—",
        doc: "Includes files (glob masks allowed, sorted) in place; relative paths are taken from the main configuration file's folder.\n\n```nginx\ninclude mime.types;\ninclude conf.d/*.conf;\n```",
    },
    Def {
        name: "events",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            let m = s.main();
            if m.events_seen {
                return Err(ConfError::new("\"events\" directive is duplicate", &d.span));
            }
            m.events_seen = true;
            e.walk(block(d), &mut Scope::Events(m))
        },
        syntax: "events { … }",
        default: "—",
        doc: "Connection processing settings.\n\n```nginx\nevents {\n    worker_connections 4096;\n}\n```",
    },
    Def {
        name: "worker_connections",
        ignored: false,
        ctx: Ctx::EVENTS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.main().worker_connections, number(d, 0)? as usize, d),
        syntax: "worker_connections number;",
        default: "512",
        doc: "Most connections one worker holds at once, as in nginx counting both client connections and the worker's connections to upstream servers (proxy, FastCGI, pooled keep-alive ones included). A client connection past it is closed at once and logged. While fewer than an eighth are free, the worker stops accepting (new clients wait in the kernel's queue), keeping room for the upstream connections its clients' requests need; when none is free, idle keep-alive clients are closed to make room (\"reusing connections\"), and an upstream connection waits for a slot within its connect timeout before the request is answered with 500.\n\n```nginx\nevents { worker_connections 10000; }\n```",
    },
    Def {
        name: "use",
        ignored: false,
        ctx: Ctx::EVENTS,
        arity: ONE,
        set: |_, d, _| match d.arg(0) {
            "epoll" => Ok(()),
            m => Err(ConfError::new(
                format!("invalid event type \"{m}\", vireo uses \"epoll\""),
                &d.span,
            )),
        },
        syntax: "use epoll;",
        default: "epoll",
        doc: "The connection processing method: `epoll`, the only one vireo has (as nginx on Linux refuses the others).\n\n```nginx\nevents { use epoll; }\n```",
    },
    Def {
        name: "multi_accept",
        ignored: false,
        ctx: Ctx::EVENTS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.main().multi_accept, flag(d, 0)?, d),
        syntax: "multi_accept on | off;",
        default: "off",
        doc: "`on`: a worker accepts every pending connection when woken; one with fewer than 1,024 clients serves the first 16 of a burst before it takes the rest; `off`: one per wake-up, then it serves others.\n\n```nginx\nevents { multi_accept on; }\n```",
    },
    Def {
        name: "http",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            let m = s.main();
            if m.http.is_some() {
                return Err(ConfError::new("\"http\" directive is duplicate", &d.span));
            }
            let mut h = HttpConf::default();
            e.walk(block(d), &mut Scope::Http(&mut h))?;
            m.http = Some(h);
            Ok(())
        },
        syntax: "http { … }",
        default: "—",
        doc: "The HTTP server configuration.\n\n```nginx\nhttp {\n    include mime.types;\n    server { listen 80; root /var/www/html; }\n}\n```",
    },
    Def {
        name: "stream",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            let m = s.main();
            if m.stream.is_some() {
                return Err(ConfError::new("\"stream\" directive is duplicate", &d.span));
            }
            let mut st = StreamConf::default();
            e.walk(block(d), &mut Scope::Stream(&mut st))?;
            m.stream = Some(st);
            Ok(())
        },
        syntax: "stream { … }",
        default: "—",
        doc: "TCP and UDP proxying (nginx's stream module): servers that accept connections or datagrams and pass them to an upstream, or answer them with `return`. Its settings are inherited by its servers; `upstream`, `map`, `geo`, `split_clients`, `log_format` and `limit_conn_zone` blocks of their own stand here. See docs/stream.md.\n\n```nginx\nstream {\n    upstream db { server 10.0.0.5:5432; server 10.0.0.6:5432; }\n    server {\n        listen 5432;\n        proxy_pass db;\n    }\n}\n```",
    },
    Def {
        name: "server",
        ignored: false,
        ctx: Ctx::STREAM,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            let Scope::Stream(st) = s else { unreachable!() };
            let mut srv = StreamServerConf {
                conf: Default::default(),
                listens: Vec::new(),
                names: Vec::new(),
                phases: Default::default(),
                span: d.span.clone(),
            };
            e.walk(block(d), &mut Scope::StreamServer(&mut srv))?;
            st.servers.push(srv);
            Ok(())
        },
        syntax: "server { … }",
        default: "—",
        doc: "A stream server: the addresses it listens on and what it does with each connection (or UDP session): `proxy_pass` or `return`.\n\n```nginx\nserver {\n    listen 53 udp;\n    proxy_pass 10.0.0.53:53;\n    proxy_responses 1;\n}\n```",
    },
    Def {
        name: "listen",
        ignored: false,
        ctx: Ctx::STREAM_SERVER,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let Scope::StreamServer(srv) = s else {
                unreachable!()
            };
            srv.listens.push(listen(d, true)?);
            Ok(())
        },
        syntax: "listen address:port | port | unix:path [default_server] [ssl] [udp] [proxy_protocol] [reuseport] [backlog=number] [rcvbuf=size] [sndbuf=size] [bind] [ipv6only=on|off] [so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]];",
        default: "—",
        doc: "An address the stream server accepts connections on; with `udp`, datagrams (each client address is a session, which lasts until `proxy_timeout` passes without a datagram, `proxy_responses` answers came or `proxy_requests` datagrams were taken). `proxy_protocol`: each connection opens with a PROXY protocol header (v1 or v2), read within `proxy_protocol_timeout`; its addresses are `$proxy_protocol_addr` and its kin, and `set_real_ip_from` makes the client address the one it gives. `ssl`: sessions are TLS, the handshake made after the access phase (see `ssl_certificate`; TCP addresses only). Several servers may listen on one address: the TLS server name chooses among them by `server_name`, else the `default_server` (or the first) takes the session. `reuseport`, `backlog` and the socket options are those of http's `listen`.\n\n```nginx\nlisten 127.0.0.1:12345;\nlisten 443 ssl default_server;\nlisten 53 udp reuseport;\nlisten unix:/run/vireo-stream.sock proxy_protocol;\n```",
    },
    Def {
        name: "server_name",
        ignored: false,
        ctx: Ctx::STREAM_SERVER,
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let Scope::StreamServer(srv) = s else {
                unreachable!()
            };
            server_names(d, e, &mut srv.names, &mut srv.phases)
        },
        syntax: "server_name name …;",
        default: "\"\"",
        doc: "Names of a stream server, for addresses several servers listen on: a session goes to the server the TLS server name (SNI) names — in the handshake on `listen … ssl`, or as `ssl_preread` reads it — chosen as http's `server_name` chooses (exact, leading wildcard, trailing wildcard, `~regex` with its captures as variables), else to the address's `default_server` (or its first server). The first name is `$server_name`.\n\n```nginx\nserver {\n    listen 443 ssl;\n    server_name db.example.com;\n    proxy_pass db;\n}\n```",
    },
    Def {
        name: "server",
        ignored: false,
        ctx: Ctx::HTTP,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            let Scope::Http(h) = s else { unreachable!() };
            let mut srv = ServerConf {
                span: Some(d.span.clone()),
                ..Default::default()
            };
            e.walk(block(d), &mut Scope::Server(&mut srv))?;
            h.servers.push(srv);
            Ok(())
        },
        syntax: "server { … }",
        default: "—",
        doc: "A virtual server.\n\n```nginx\nserver {\n    listen 80;\n    server_name example.com;\n    root /var/www/example.com;\n}\n```",
    },
    Def {
        name: "listen",
        ignored: false,
        ctx: Ctx::SERVER,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let Scope::Server(srv) = s else {
                unreachable!()
            };
            let spec = listen(d, false)?;
            srv.listens.push(spec);
            Ok(())
        },
        syntax: "listen address[:port] | port | unix:path [default_server] [ssl] [http2 | quic] [proxy_protocol] [reuseport] [backlog=number] [rcvbuf=size] [sndbuf=size] [deferred] [bind] [ipv6only=on|off] [fastopen=number] [so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]];",
        default: "*:80 (root) or *:8000",
        doc: "Address and port the server accepts connections on. `reuseport` gives every worker its own socket (SO_REUSEPORT); without it the workers share one. `ssl` makes it a TLS address (see `ssl_certificate`; TCP addresses only: a `unix:` one with `ssl` is refused); `http2` speaks HTTP/2 there too (ALPN `h2` with `ssl`, prior knowledge without). `quic` makes it a UDP address speaking HTTP/3 over QUIC (TLS 1.3 with the servers' `ssl_certificate`; see `http3` and docs/http3.md): it is a socket of its own beside a TCP one on the same port, and takes neither `ssl`, `http2` nor `proxy_protocol`; with `reuseport` each worker has its own socket. `proxy_protocol`: every connection opens with a PROXY protocol header (v1 text or v2 binary) from a balancer, read before TLS and HTTP within `client_header_timeout`; a malformed one closes the connection. Its addresses are `$proxy_protocol_addr`, `$proxy_protocol_port`, `$proxy_protocol_server_addr`, `$proxy_protocol_server_port` (v2 TLVs: `$proxy_protocol_tlv_NAME`); `real_ip_header proxy_protocol` makes the client address the one it gives. Socket options, given in one `listen` per address (as nginx): `rcvbuf`/`sndbuf` (SO_RCVBUF/SO_SNDBUF), `so_keepalive` (SO_KEEPALIVE; `keepidle` and `keepintvl` in seconds or with a time unit, `keepcnt` a count: TCP_KEEPIDLE/TCP_KEEPINTVL/TCP_KEEPCNT, inherited by accepted connections), `deferred` (TCP_DEFER_ACCEPT: accepted once the first data arrives), `fastopen` (TCP_FASTOPEN queue length), `ipv6only` (IPV6_V6ONLY of an IPv6 address, on by default). A reload sets changed options on the sockets it keeps, except `ipv6only` (restart or upgrade); an option removed keeps its value until then, except `deferred`, turned off. `bind` is accepted and always in effect (every address has its own socket). `setfib` and `accept_filter` (FreeBSD) are refused.\n\n```nginx\nlisten 80 default_server reuseport;\nlisten 127.0.0.1:8080;\nlisten unix:/run/vireo.sock;\nlisten 127.0.0.1:8443 ssl proxy_protocol;\nlisten [::]:443 ipv6only=on deferred so_keepalive=30m::10 rcvbuf=256k fastopen=256;\nlisten 443 quic reuseport;\n```",
    },
    Def {
        name: "server_name",
        ignored: false,
        ctx: Ctx::SERVER,
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let Scope::Server(srv) = s else {
                unreachable!()
            };
            server_names(d, e, &mut srv.names, &mut srv.phases)
        },
        syntax: "server_name name …;",
        default: "\"\"",
        doc: "Names of the virtual server, chosen by the Host header (or the host of an absolute request URI) as nginx does: an exact name first, then the longest leading wildcard (`*.example.com`; `.example.com` is both `example.com` and `*.example.com`), then the longest trailing wildcard (`www.example.*`), then `~regex` names in order (caseless; their captures, numbered and named, are variables of the request), else the `default_server` of the address (or its first server). `\"\"` matches requests without Host; `$hostname` is the machine's name. The first name is `$server_name`.\n\n```nginx\nserver_name example.com www.example.com;\nserver_name *.example.org;\nserver_name ~^(?<user>[a-z]+)\\.example\\.net$;\n```",
    },
    Def {
        name: "location",
        ignored: false,
        ctx: Ctx::SERVER.or(Ctx::LOCATION),
        arity: Arity::block(1, 2),
        set: |s, d, e| {
            let mut loc = location(d, e)?;
            e.walk(block(d), &mut Scope::Location(&mut loc))?;
            e.vars.at(&d.span);
            alias_vars(&mut loc, d, e)?;
            match s {
                Scope::Server(srv) => srv.locations.push(loc),
                Scope::Location(parent) => {
                    nested_ok(parent, &loc, d)?;
                    parent.locations.push(loc)
                }
                _ => unreachable!(),
            }
            Ok(())
        },
        syntax: "location [ = | ~ | ~* | ^~ ] uri { … } | location @name { … }",
        default: "—",
        doc: "Settings by request URI, chosen as nginx does: an `=` location equal to the URI; else the longest matching prefix, and unless it is a `^~` one, the first `~` (case-sensitive) or `~*` (caseless) regex location that matches, in the order written (a regex location's captures are variables of the request); else that longest prefix. Locations nest (the search continues inside the chosen prefix location). `@name` locations are reached only by try_files and error_page. A prefix location ending in `/` whose handler is proxy-like (`fastcgi_pass`, `proxy_pass`) answers its name without the slash with a 301 to it.\n\n```nginx\nlocation = / { }\nlocation / { }\nlocation ^~ /static/ { }\nlocation ~* \\.(png|jpg)$ { }\nlocation @fallback { }\n```",
    },
    Def {
        name: "types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::block(0, 0),
        set: |s, d, e| {
            // As nginx: a second block at one level adds to the first, and an
            // extension given again takes its later type, with a warning.
            let core = &mut s.loc().core;
            let mut t = core
                .types
                .take()
                .map_or_else(MimeTypes::default, |t| (*t).clone());
            for entry in block(d) {
                if entry.block.is_some() || entry.args.is_empty() {
                    return Err(ConfError::new(
                        format!("invalid types entry \"{}\"", entry.name),
                        &entry.span,
                    ));
                }
                for ext in entry.arg_strs() {
                    if let Some(old) = t.insert(&entry.name, ext) {
                        e.notice(format!(
                            "duplicate extension \"{ext}\", content type: \"{}\", previous content type: \"{old}\" in {}",
                            entry.name, entry.span
                        ));
                    }
                }
            }
            core.types = Some(Arc::new(t));
            Ok(())
        },
        syntax: "types { mime/type extension …; … }",
        default: "the embedded table",
        doc: "Maps file name extensions to MIME types; a `types` block replaces the inherited table. Several blocks at one level add up, as nginx: an extension given again takes its later type, with a \"duplicate extension\" notice.\n\n```nginx\ntypes {\n    text/html html htm;\n    application/wasm wasm;\n}\n```",
    },
    Def {
        name: "default_type",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.default_type, Arc::from(d.arg(0)), d),
        syntax: "default_type mime-type;",
        default: "text/plain",
        doc: "MIME type of files whose extension is not in `types`.\n\n```nginx\ndefault_type application/octet-stream;\n```",
    },
    Def {
        name: "keepalive_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let core = &mut s.loc().core;
            if d.args.len() == 2 {
                set_once(&mut core.keepalive_header, Some(time(d, 1)?), d)?;
            }
            set_once(&mut core.keepalive_timeout, time(d, 0)?, d)
        },
        syntax: "keepalive_timeout timeout [header_timeout];",
        default: "75s",
        doc: "How long an idle keep-alive connection stays open; 0 disables keep-alive. An HTTP/2 connection ends with GOAWAY after this long without a stream; before its first stream it waits the longer of this and `client_header_timeout`, and with 0 it serves that stream, then sends GOAWAY. `header_timeout`: sent to the client as `Keep-Alive: timeout=N` (seconds) on keep-alive HTTP/1 responses.\n\n```nginx\nkeepalive_timeout 30s 25s;\n```",
    },
    Def {
        name: "keepalive_requests",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.keepalive_requests, number(d, 0)?, d),
        syntax: "keepalive_requests number;",
        default: "1000",
        doc: "Most requests served on one keep-alive connection; the last one is answered with `Connection: close`.\n\n```nginx\nkeepalive_requests 10000;\n```",
    },
    Def {
        name: "keepalive_disable",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            use crate::conf::model::{KEEPALIVE_DISABLE_MSIE6, KEEPALIVE_DISABLE_SAFARI};
            let mut v = 0;
            for a in d.arg_strs() {
                v |= match a {
                    "none" => 0,
                    "msie6" => KEEPALIVE_DISABLE_MSIE6,
                    "safari" => KEEPALIVE_DISABLE_SAFARI,
                    _ => {
                        return Err(ConfError::new(
                            format!("invalid value \"{a}\" in \"keepalive_disable\" directive"),
                            &d.span,
                        ));
                    }
                };
            }
            set_once(&mut s.loc().core.keepalive_disable, v, d)
        },
        syntax: "keepalive_disable none | browser …;",
        default: "msie6",
        doc: "Browsers whose connections are not kept alive after a request, as nginx: `msie6` after a POST from MSIE 4 to 6 (6 without SV1), `safari` after any request from Safari on Mac OS X; `none` keeps every browser's. The User-Agent decides.\n\n```nginx\nkeepalive_disable msie6 safari;\n```",
    },
    Def {
        name: "msie_refresh",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.msie_refresh, flag(d, 0)?, d),
        syntax: "msie_refresh on | off;",
        default: "off",
        doc: "Answers MSIE (a User-Agent with `MSIE `, not Opera) with a page that refreshes to the new address instead of the redirects vireo makes itself (`return 301/302`, `rewrite … redirect|permanent`, `error_page` to an address, the slash added to a directory), as nginx: status 200, `<meta http-equiv=\"Refresh\" content=\"0; URL=…\">` with spaces, quotes and bytes outside printable ASCII escaped. A proxied or FastCGI redirect passes unchanged.\n\n```nginx\nmsie_refresh on;\n```",
    },
    Def {
        name: "log_subrequest",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.log_subrequest, flag(d, 0)?, d),
        syntax: "log_subrequest on | off;",
        default: "off",
        doc: "Writes subrequests (SSI includes) to the access log of the location that answered them, as nginx; each is logged when its body has been read.\n\n```nginx\nlog_subrequest on;\n```",
    },
    Def {
        name: "post_action",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            let v = d.arg(0);
            let uri = match v {
                "off" => None,
                _ if v.starts_with('/') => Some(std::sync::Arc::from(v.as_bytes())),
                _ => {
                    return Err(ConfError::new(
                        format!(
                            "invalid URI \"{v}\" in \"post_action\" (a URI starting with \"/\", or off)"
                        ),
                        &d.span,
                    ));
                }
            };
            set_once(&mut s.loc().core.post_action, uri, d)
        },
        syntax: "post_action uri | off;",
        default: "off",
        doc: "Once the response has been sent, makes an internal GET to this URI (with its own arguments after `?`) through the server's locations, as nginx: `internal` locations are reachable, the client's request line and headers stay, and the answer is discarded. The next request of the connection waits for it. A named location (`@name`) is refused.\n\n```nginx\nlocation /download/ {\n    post_action /count;\n}\nlocation = /count {\n    internal;\n    proxy_pass http://stats;\n}\n```",
    },
    Def {
        name: "subrequest_output_buffer_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().core.subrequest_output_buffer_size,
                size(d, 0)?,
                d,
            )
        },
        syntax: "subrequest_output_buffer_size size;",
        default: "4k",
        doc: "The most of a subrequest's body kept in memory when a module needs it whole (SSI's `include … set=`), as nginx; a longer body fails the subrequest (\"too big subrequest response\") and the request with it. Set in the location that answers the subrequest.\n\n```nginx\nsubrequest_output_buffer_size 16k;\n```",
    },
    Def {
        name: "keepalive_time",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.keepalive_time, time(d, 0)?, d),
        syntax: "keepalive_time time;",
        default: "1h",
        doc: "Longest life of a keep-alive connection, as nginx: an HTTP/1 request that starts after it is answered with `Connection: close` and the connection closes (to a tenth of a second); an HTTP/2 stream that opens after it is the last, followed by GOAWAY.\n\n```nginx\nkeepalive_time 10m;\n```",
    },
    Def {
        name: "client_header_timeout",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.client_header_timeout, time(d, 0)?, d),
        syntax: "client_header_timeout time;",
        default: "60s",
        doc: "Time allowed to receive a whole request head; the connection is closed after it.\n\n```nginx\nclient_header_timeout 15s;\n```",
    },
    Def {
        name: "client_body_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.client_body_timeout, time(d, 0)?, d),
        syntax: "client_body_timeout time;",
        default: "60s",
        doc: "Longest wait between two reads of a request body; the connection is closed after it.\n\n```nginx\nclient_body_timeout 30s;\n```",
    },
    Def {
        name: "send_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.send_timeout, time(d, 0)?, d),
        syntax: "send_timeout time;",
        default: "60s",
        doc: "Longest wait between two successful writes to the client; the connection is closed after it.\n\n```nginx\nsend_timeout 30s;\n```",
    },
    Def {
        name: "reset_timedout_connection",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.reset_timedout_connection, flag(d, 0)?, d),
        syntax: "reset_timedout_connection on | off;",
        default: "off",
        doc: "Close timed-out connections with a TCP reset (SO_LINGER 0), freeing their memory at once.\n\n```nginx\nreset_timedout_connection on;\n```",
    },
    Def {
        name: "client_max_body_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.client_max_body_size, size(d, 0)?, d),
        syntax: "client_max_body_size size;",
        default: "1m",
        doc: "Largest request body accepted; larger ones get 413. 0 disables the check.\n\n```nginx\nclient_max_body_size 64m;\n```",
    },
    Def {
        name: "client_header_buffer_size",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().core.client_header_buffer_size,
                size(d, 0)? as usize,
                d,
            )
        },
        syntax: "client_header_buffer_size size;",
        default: "1k",
        doc: "First buffer for a request head (the default server's value applies, as in nginx): a head that fits it may have lines of any length; past it, each line must fit one of `large_client_header_buffers`.\n\n```nginx\nclient_header_buffer_size 2k;\n```",
    },
    Def {
        name: "large_client_header_buffers",
        ignored: false,
        ctx: Ctx::HS,
        arity: Arity::args(2, 2),
        set: |s, d, _| {
            let v = (number(d, 0)? as usize, size(d, 1)? as usize);
            if v.0 == 0 || v.1 == 0 {
                return Err(bad_arg(d, d.arg(0)));
            }
            set_once(&mut s.loc().core.large_client_header_buffers, v, d)
        },
        syntax: "large_client_header_buffers number size;",
        default: "4 8k",
        doc: "A request line longer than `size` gets 414; a header line longer than `size`, or a head over `number`×`size`, gets 431.\n\n```nginx\nlarge_client_header_buffers 4 16k;\n```",
    },
    Def {
        name: "underscores_in_headers",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.underscores_in_headers, flag(d, 0)?, d),
        syntax: "underscores_in_headers on | off;",
        default: "off",
        doc: "Keeps request header fields with `_` in their names; by default they are dropped, as nginx does (`X_Real_IP` would reach a FastCGI application as the same `HTTP_X_REAL_IP` as `X-Real-IP`). As in nginx, the default server of an address decides for its requests.\n\n```nginx\nunderscores_in_headers on;\n```",
    },
    Def {
        name: "ignore_invalid_headers",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.ignore_invalid_headers, flag(d, 0)?, d),
        syntax: "ignore_invalid_headers on | off;",
        default: "on",
        doc: "Drops request header fields whose names nginx calls invalid: with `_` unless `underscores_in_headers` is on. `off` keeps them. (A name with characters that are not a token at all is a 400 either way.) The default server of an address decides for its requests.\n\n```nginx\nignore_invalid_headers off;\n```",
    },
    Def {
        name: "lingering_close",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "off" => Lingering::Off,
                "on" => Lingering::On,
                "always" => Lingering::Always,
                v => return Err(bad_arg(d, v)),
            };
            set_once(&mut s.loc().core.lingering_close, v, d)
        },
        syntax: "lingering_close off | on | always;",
        default: "on",
        doc: "After an early response, keep reading and discarding what the client still sends, so it sees the response rather than a reset.\n\n```nginx\nlingering_close always;\n```",
    },
    Def {
        name: "lingering_time",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.lingering_time, time(d, 0)?, d),
        syntax: "lingering_time time;",
        default: "30s",
        doc: "Longest total time of a lingering close.\n\n```nginx\nlingering_time 10s;\n```",
    },
    Def {
        name: "lingering_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.lingering_timeout, time(d, 0)?, d),
        syntax: "lingering_timeout time;",
        default: "5s",
        doc: "Longest wait for more client data during a lingering close.\n\n```nginx\nlingering_timeout 2s;\n```",
    },
    Def {
        name: "tcp_nodelay",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.tcp_nodelay, flag(d, 0)?, d),
        syntax: "tcp_nodelay on | off;",
        default: "on",
        doc: "Sets TCP_NODELAY on client connections, as nginx: on a TLS connection at once, on a plain one when it is kept alive after a response or a response streams (several writes). A connection closed after a single response, which leaves in one write that Nagle's algorithm does not hold back, saves the syscall.\n\n```nginx\ntcp_nodelay on;\n```",
    },
    Def {
        name: "tcp_nopush",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.tcp_nopush, flag(d, 0)?, d),
        syntax: "tcp_nopush on | off;",
        default: "off",
        doc: "With sendfile: the response head is sent with MSG_MORE so it leaves in the same packets as the start of the file (the effect of TCP_CORK around head + sendfile, without two setsockopt calls per response).\n\n```nginx\nsendfile on;\ntcp_nopush on;\n```",
    },
    Def {
        name: "server_tokens",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            // nginx's `build` adds a build name; vireo has none, so it is `on`.
            let on = match d.arg(0) {
                "on" | "build" => true,
                "off" => false,
                v => {
                    return Err(ConfError::new(
                        format!(
                            "invalid value \"{v}\" in \"server_tokens\" directive, it must be \"on\", \"off\" or \"build\""
                        ),
                        &d.span,
                    ));
                }
            };
            set_once(&mut s.loc().core.server_tokens, on, d)
        },
        syntax: "server_tokens on | off | build;",
        default: "on",
        doc: "Show vireo's version in the Server header and error pages (`build`: the same, vireo has no build name).\n\n```nginx\nserver_tokens off;\n```",
    },
    Def {
        name: "chunked_transfer_encoding",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.chunked_transfer_encoding, flag(d, 0)?, d),
        syntax: "chunked_transfer_encoding on | off;",
        default: "on",
        doc: "`off`: an HTTP/1.1 response body of unknown length is not chunked; it ends with the connection, which closes after it (and no trailers are sent).\n\n```nginx\nlocation /legacy { chunked_transfer_encoding off; }\n```",
    },
    Def {
        name: "log_not_found",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.log_not_found, flag(d, 0)?, d),
        syntax: "log_not_found on | off;",
        default: "on",
        doc: "`off`: a file that does not exist (\"open() … failed (2: No such file or directory)\") is answered with 404 without an error log line.\n\n```nginx\nlocation = /favicon.ico { log_not_found off; }\n```",
    },
    Def {
        name: "absolute_redirect",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.absolute_redirect, flag(d, 0)?, d),
        syntax: "absolute_redirect on | off;",
        default: "on",
        doc: "`off`: the redirects vireo makes itself (a directory asked for without its slash, `return` and `rewrite` to a URI, `error_page` to a URI, a proxied location's slash) carry a relative `Location` (`/dir/`) instead of scheme, host and port.\n\n```nginx\nabsolute_redirect off;\n```",
    },
    Def {
        name: "server_name_in_redirect",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.server_name_in_redirect, flag(d, 0)?, d),
        syntax: "server_name_in_redirect on | off;",
        default: "off",
        doc: "`on`: absolute redirects name the server's first `server_name` rather than the request's Host.\n\n```nginx\nserver_name example.com;\nserver_name_in_redirect on;\n```",
    },
    Def {
        name: "port_in_redirect",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.port_in_redirect, flag(d, 0)?, d),
        syntax: "port_in_redirect on | off;",
        default: "on",
        doc: "`off`: absolute redirects leave out the port the request came in on.\n\n```nginx\nport_in_redirect off;\n```",
    },
    Def {
        name: "merge_slashes",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.merge_slashes, flag(d, 0)?, d),
        syntax: "merge_slashes on | off;",
        default: "on",
        doc: "`off`: runs of slashes in the request URI are kept for location matching, `$uri` and the file path (`.` and `..` segments are still resolved, an empty segment counting as one, so the URI never climbs above `/`).\n\n```nginx\nmerge_slashes off;\n```",
    },
    Def {
        name: "auth_delay",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.auth_delay, time(d, 0)?, d),
        syntax: "auth_delay time;",
        default: "0s",
        doc: "A request refused with 401 by the access phase (`auth_basic`) is answered only after this delay, as nginx, so guessing passwords gains nothing from timing.\n\n```nginx\nauth_delay 2s;\n```",
    },
    Def {
        name: "limit_except",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::block(1, MANY),
        set: limit_except,
        syntax: "limit_except method … { … }",
        default: "—",
        doc: "Settings for the requests of a location whose method is not one of those listed (`GET` brings `HEAD`), as nginx: inside, `allow`, `deny`, `auth_basic`, `auth_basic_user_file`, `access_log`, `proxy_pass` and `fastcgi_pass`; what the block does not set it takes from the location, its content handler included. Methods: GET, HEAD, POST, PUT, DELETE, MKCOL, COPY, MOVE, OPTIONS, PROPFIND, PROPPATCH, LOCK, UNLOCK, PATCH; a method nginx does not know always gets the block's settings.\n\n```nginx\nlocation /api/ {\n    proxy_pass http://backend;\n    limit_except GET {\n        allow 192.168.1.0/24;\n        deny all;\n    }\n}\n```",
    },
    Def {
        name: "internal",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::args(0, 0),
        set: |s, _, _| {
            let Scope::Location(l) = s else {
                unreachable!()
            };
            l.phases.internal = true;
            Ok(())
        },
        syntax: "internal;",
        default: "—",
        doc: "The location serves only internal redirects (error_page, try_files, index, rewrite); a request from a client that lands on it gets 404.\n\n```nginx\nlocation /errors/ { internal; }\n```",
    },
];

/// Directives that mean nothing to vireo: accepted, with a notice in the error log.
pub static IGNORED: &[Def] = &[
    ignored(
        "map_hash_max_size",
        Ctx::HTTP,
        ONE,
        "map_hash_max_size size;",
        "vireo sizes its tables itself\n\n```nginx\nmap_hash_max_size 4096;\n```",
    ),
    ignored(
        "map_hash_bucket_size",
        Ctx::HTTP,
        ONE,
        "map_hash_bucket_size size;",
        "vireo sizes its tables itself\n\n```nginx\nmap_hash_bucket_size 128;\n```",
    ),
    ignored(
        "accept_mutex",
        Ctx::EVENTS,
        ONE,
        "accept_mutex on | off;",
        "each worker accepts on its own\n\n```nginx\nevents { accept_mutex off; }\n```",
    ),
    ignored(
        "accept_mutex_delay",
        Ctx::EVENTS,
        ONE,
        "accept_mutex_delay time;",
        "each worker accepts on its own\n\n```nginx\nevents { accept_mutex_delay 500ms; }\n```",
    ),
    ignored(
        "master_process",
        Ctx::MAIN,
        ONE,
        "master_process on | off;",
        "vireo runs workers as threads of one process\n\n```nginx\nmaster_process on;\n```",
    ),
    ignored(
        "worker_cpu_affinity",
        Ctx::MAIN,
        Arity::args(1, MANY),
        "worker_cpu_affinity mask …;",
        "not applied: pin the process with taskset\n\n```nginx\nworker_cpu_affinity auto;\n```",
    ),
    ignored(
        "worker_priority",
        Ctx::MAIN,
        ONE,
        "worker_priority number;",
        "not applied: use nice\n\n```nginx\nworker_priority -5;\n```",
    ),
    ignored(
        "timer_resolution",
        Ctx::MAIN,
        ONE,
        "timer_resolution interval;",
        "vireo caches time per second itself\n\n```nginx\ntimer_resolution 100ms;\n```",
    ),
    ignored(
        "pcre_jit",
        Ctx::MAIN,
        ONE,
        "pcre_jit on | off;",
        "vireo's regex engine needs no JIT\n\n```nginx\npcre_jit on;\n```",
    ),
    ignored(
        "lock_file",
        Ctx::MAIN,
        ONE,
        "lock_file file;",
        "vireo takes no lock file\n\n```nginx\nlock_file logs/nginx.lock;\n```",
    ),
    ignored(
        "proxy_temp_path",
        Ctx::HSL,
        Arity::args(1, 4),
        "proxy_temp_path path [level …];",
        "vireo writes no temp files\n\n```nginx\nproxy_temp_path /var/cache/nginx/proxy_temp;\n```",
    ),
    ignored(
        "fastcgi_temp_path",
        Ctx::HSL,
        Arity::args(1, 4),
        "fastcgi_temp_path path [level …];",
        "vireo writes no temp files\n\n```nginx\nfastcgi_temp_path /var/cache/nginx/fastcgi_temp;\n```",
    ),
    ignored(
        "uwsgi_temp_path",
        Ctx::HSL,
        Arity::args(1, 4),
        "uwsgi_temp_path path [level …];",
        "vireo writes no temp files\n\n```nginx\nuwsgi_temp_path /var/cache/nginx/uwsgi_temp;\n```",
    ),
    ignored(
        "scgi_temp_path",
        Ctx::HSL,
        Arity::args(1, 4),
        "scgi_temp_path path [level …];",
        "vireo writes no temp files\n\n```nginx\nscgi_temp_path /var/cache/nginx/scgi_temp;\n```",
    ),
    ignored(
        "server_names_hash_bucket_size",
        Ctx::HTTP.or(Ctx::STREAM),
        ONE,
        "server_names_hash_bucket_size size;",
        "vireo sizes its tables itself\n\n```nginx\nserver_names_hash_bucket_size 64;\n```",
    ),
    ignored(
        "server_names_hash_max_size",
        Ctx::HTTP.or(Ctx::STREAM),
        ONE,
        "server_names_hash_max_size size;",
        "vireo sizes its tables itself\n\n```nginx\nserver_names_hash_max_size 1024;\n```",
    ),
    ignored(
        "types_hash_max_size",
        Ctx::HSL,
        ONE,
        "types_hash_max_size size;",
        "vireo sizes its tables itself\n\n```nginx\ntypes_hash_max_size 2048;\n```",
    ),
    ignored(
        "types_hash_bucket_size",
        Ctx::HSL,
        ONE,
        "types_hash_bucket_size size;",
        "vireo sizes its tables itself\n\n```nginx\ntypes_hash_bucket_size 64;\n```",
    ),
    ignored(
        "connection_pool_size",
        Ctx::HS,
        ONE,
        "connection_pool_size size;",
        "vireo sizes its per-connection memory itself\n\n```nginx\nconnection_pool_size 512;\n```",
    ),
    ignored(
        "request_pool_size",
        Ctx::HS,
        ONE,
        "request_pool_size size;",
        "vireo sizes its per-request memory itself\n\n```nginx\nrequest_pool_size 4k;\n```",
    ),
    ignored(
        "variables_hash_max_size",
        Ctx::HTTP,
        ONE,
        "variables_hash_max_size size;",
        "vireo sizes its tables itself\n\n```nginx\nvariables_hash_max_size 2048;\n```",
    ),
    ignored(
        "variables_hash_bucket_size",
        Ctx::HTTP,
        ONE,
        "variables_hash_bucket_size size;",
        "vireo sizes its tables itself\n\n```nginx\nvariables_hash_bucket_size 128;\n```",
    ),
    ignored(
        "output_buffers",
        Ctx::HSL,
        Arity::args(2, 2),
        "output_buffers number size;",
        "vireo sizes its buffers itself\n\n```nginx\noutput_buffers 2 32k;\n```",
    ),
    ignored(
        "postpone_output",
        Ctx::HSL,
        ONE,
        "postpone_output size;",
        "vireo sizes its buffers itself\n\n```nginx\npostpone_output 1460;\n```",
    ),
    ignored(
        "http2_recv_buffer_size",
        Ctx::HTTP,
        ONE,
        "http2_recv_buffer_size size;",
        "the HTTP/2 codec sizes its read buffer itself\n\n```nginx\nhttp2_recv_buffer_size 256k;\n```",
    ),
    ignored(
        "http2_idle_timeout",
        Ctx::HS,
        ONE,
        "http2_idle_timeout time;",
        "obsolete since nginx 1.19.7, keepalive_timeout bounds idle HTTP/2 connections\n\n```nginx\nhttp2_idle_timeout 3m;\n```",
    ),
    ignored(
        "http2_recv_timeout",
        Ctx::HS,
        ONE,
        "http2_recv_timeout time;",
        "obsolete since nginx 1.19.7, client_header_timeout bounds the wait for the preface and keepalive_timeout the wait for requests\n\n```nginx\nhttp2_recv_timeout 30s;\n```",
    ),
    ignored(
        "http2_max_requests",
        Ctx::HS,
        ONE,
        "http2_max_requests number;",
        "obsolete since nginx 1.19.7, keepalive_requests bounds the requests of an HTTP/2 connection\n\n```nginx\nhttp2_max_requests 1000;\n```",
    ),
    ignored(
        "http2_max_field_size",
        Ctx::HS,
        ONE,
        "http2_max_field_size size;",
        "obsolete since nginx 1.19.7, large_client_header_buffers bounds HTTP/2 header fields\n\n```nginx\nhttp2_max_field_size 4k;\n```",
    ),
    ignored(
        "http2_max_header_size",
        Ctx::HS,
        ONE,
        "http2_max_header_size size;",
        "obsolete since nginx 1.19.7, large_client_header_buffers bounds HTTP/2 header lists\n\n```nginx\nhttp2_max_header_size 16k;\n```",
    ),
    ignored(
        "http2_push",
        Ctx::HSL,
        ONE,
        "http2_push uri | off;",
        "server push is obsolete since nginx 1.25.1\n\n```nginx\nhttp2_push off;\n```",
    ),
    ignored(
        "http2_push_preload",
        Ctx::HSL,
        ONE,
        "http2_push_preload on | off;",
        "server push is obsolete since nginx 1.25.1\n\n```nginx\nhttp2_push_preload off;\n```",
    ),
];

/// An accepted-and-ignored directive entry: `doc` is the reason, which the
/// walker's notice gives, followed by the reference's ```` ```nginx ```` example
/// (left out of the notice).
pub const fn ignored(
    name: &'static str,
    ctx: Ctx,
    arity: Arity,
    syntax: &'static str,
    doc: &'static str,
) -> Def {
    Def {
        name,
        ignored: true,
        ctx,
        arity,
        // Not called: the walker logs the notice.
        set: |_, _, _| Ok(()),
        syntax,
        default: "—",
        doc,
    }
}

/// The names of a `server_name` (http or stream), as written: `~` names
/// compiled (caseless, their captures variables) into `phases`, the others
/// checked and lowercased.
fn server_names(
    d: &Directive,
    e: &mut Env,
    names: &mut Vec<String>,
    phases: &mut crate::core::route::Phases,
) -> Result<(), ConfError> {
    for a in &d.args {
        let name = a.value.as_str();
        if let Some(re) = name.strip_prefix('~') {
            if re.is_empty() {
                return Err(ConfError::new(
                    format!("empty regex in server name \"{name}\""),
                    &d.span,
                ));
            }
            // The regex keeps its case (`\D` is not `\d`); it matches caselessly.
            // Its captures (numbered and named) are variables of the request.
            let compiled = crate::core::vars::Re::new(re, true, &mut e.vars)
                .map_err(|e| ConfError::new(e, &d.span))?;
            phases.name_regex.push(compiled);
            names.push(name.to_string());
            continue;
        }
        let stars = name.matches('*').count();
        let wildcard_ok = stars == 0
            || (stars == 1
                && ((name.starts_with("*.") && name.len() > 2)
                    || (name.ends_with(".*") && name.len() > 2)));
        if !wildcard_ok {
            return Err(ConfError::new(
                format!("invalid server name or wildcard \"{name}\""),
                &d.span,
            ));
        }
        if name == "$hostname" {
            names.push(crate::core::request::hostname().to_ascii_lowercase());
            continue;
        }
        names.push(name.to_ascii_lowercase());
    }
    Ok(())
}

fn block(d: &Directive) -> &[Directive] {
    d.block.as_deref().unwrap_or(&[])
}

/// One `listen` of an http server, or of a stream server (`stream`: `udp`
/// allowed, the http-only options refused).
fn listen(d: &Directive, stream: bool) -> Result<ListenSpec, ConfError> {
    let a = d.arg(0);
    let addr = if let Some(path) = a.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(ConfError::new(
                format!("no path in the unix domain socket in \"{a}\" of the \"listen\" directive"),
                &d.span,
            ));
        }
        ListenAddr::Unix(path.into())
    } else {
        ListenAddr::Tcp(parse_listen_addr(a).map_err(|why| {
            ConfError::new(
                format!("{why} in \"{a}\" of the \"listen\" directive"),
                &d.span,
            )
        })?)
    };
    let mut spec = ListenSpec {
        addr,
        default_server: false,
        reuseport: false,
        ssl: false,
        http2: false,
        proxy_protocol: false,
        backlog: 511,
        opts: SockOpts::default(),
        span: d.span.clone(),
    };
    let (mut udp, mut quic) = (false, false);
    for opt in d.arg_strs().skip(1) {
        match opt {
            "udp" if stream => udp = true,
            "quic" if !stream => (udp, quic) = (true, true),
            "http2" | "deferred" if stream => {
                return Err(bad_arg(d, opt));
            }
            "default_server" | "default" => spec.default_server = true,
            "reuseport" => spec.reuseport = true,
            "ssl" => spec.ssl = true,
            "http2" => spec.http2 = true,
            "proxy_protocol" => spec.proxy_protocol = true,
            // Each address has its own socket in vireo: `bind` is always in effect.
            "bind" => {}
            "deferred" => spec.opts.deferred = true,
            _ => sock_option(d, opt, &mut spec)?,
        }
    }
    let tcp_only = [
        ("so_keepalive", spec.opts.keepalive.is_some()),
        ("deferred", spec.opts.deferred),
        ("fastopen", spec.opts.fastopen.is_some()),
        ("ipv6only", spec.opts.ipv6only.is_some()),
    ];
    let v6 = matches!(spec.addr, ListenAddr::Tcp(a) if a.is_ipv6());
    for (name, set) in tcp_only {
        let fits = match spec.addr {
            ListenAddr::Unix(_) | ListenAddr::Udp(_) => false,
            ListenAddr::Tcp(_) => name != "ipv6only" || v6,
        };
        if set && !fits {
            let what = if name == "ipv6only" { "IPv6" } else { "TCP" };
            return Err(ConfError::new(
                format!(
                    "\"{name}\" of the \"listen\" directive applies to {what} addresses only, not \"{a}\""
                ),
                &d.span,
            ));
        }
    }
    // TLS is made on TCP connections only: a unix address with `ssl` would
    // otherwise be served in plain text.
    if spec.ssl && matches!(spec.addr, ListenAddr::Unix(_)) {
        let kind = if stream { "a stream " } else { "" };
        return Err(ConfError::new(
            format!("\"ssl\" of {kind}\"listen\" applies to TCP addresses only, not \"{a}\""),
            &d.span,
        ));
    }
    if quic {
        let tcp = [
            ("ssl", spec.ssl),
            ("http2", spec.http2),
            ("proxy_protocol", spec.proxy_protocol),
            ("deferred", spec.opts.deferred),
            ("fastopen", spec.opts.fastopen.is_some()),
        ];
        if let Some((what, _)) = tcp.iter().find(|(_, on)| *on) {
            return Err(ConfError::new(
                format!("\"{what}\" parameter is incompatible with \"quic\""),
                &d.span,
            ));
        }
    }
    if udp {
        let what = if quic { "quic" } else { "udp" };
        spec.addr = match spec.addr {
            ListenAddr::Tcp(a) => ListenAddr::Udp(a),
            _ => {
                return Err(ConfError::new(
                    format!("\"{what}\" of the \"listen\" directive applies to IP addresses only"),
                    &d.span,
                ));
            }
        };
        if spec.opts.keepalive.is_some() || spec.proxy_protocol || spec.ssl {
            let what = if spec.ssl {
                "ssl"
            } else if spec.proxy_protocol {
                "proxy_protocol"
            } else {
                "so_keepalive"
            };
            return Err(ConfError::new(
                format!("\"{what}\" parameter is incompatible with \"udp\""),
                &d.span,
            ));
        }
    }
    Ok(spec)
}

/// A `name=value` option of `listen` (backlog and the socket options).
fn sock_option(d: &Directive, opt: &str, spec: &mut ListenSpec) -> Result<(), ConfError> {
    let (name, v) = opt.split_once('=').unwrap_or((opt, ""));
    let invalid = || ConfError::new(format!("invalid {name} \"{opt}\""), &d.span);
    let o = &mut spec.opts;
    match name {
        "backlog" => spec.backlog = v.parse().ok().filter(|n| *n > 0).ok_or_else(invalid)?,
        "rcvbuf" => o.rcvbuf = Some(size_opt(v).ok_or_else(invalid)?),
        "sndbuf" => o.sndbuf = Some(size_opt(v).ok_or_else(invalid)?),
        "fastopen" => o.fastopen = Some(v.parse().map_err(|_| invalid())?),
        "so_keepalive" => {
            o.keepalive = Some(keepalive(v).ok_or_else(|| {
                ConfError::new(format!("invalid so_keepalive value: \"{v}\""), &d.span)
            })?)
        }
        "ipv6only" => {
            o.ipv6only = Some(match v {
                "on" => true,
                "off" => false,
                _ => return Err(bad_arg(d, opt)),
            })
        }
        "setfib" | "accept_filter" => {
            return Err(ConfError::new(
                format!(
                    "\"{name}\" of the \"listen\" directive is not available on Linux (FreeBSD only)"
                ),
                &d.span,
            ));
        }
        _ => return Err(bad_arg(d, opt)),
    }
    Ok(())
}

fn size_opt(v: &str) -> Option<usize> {
    parse_size(v).and_then(|n| usize::try_from(n).ok())
}

/// `on`, `off` or `[keepidle]:[keepintvl]:[keepcnt]` (times in whole seconds, at least one given).
fn keepalive(v: &str) -> Option<Keepalive> {
    match v {
        "on" => {
            return Some(Keepalive::On {
                idle: None,
                intvl: None,
                cnt: None,
            });
        }
        "off" => return Some(Keepalive::Off),
        _ => {}
    }
    let mut parts = v.split(':');
    let secs = |p: Option<&str>| -> Option<Option<u32>> {
        match p {
            None | Some("") => Some(None),
            Some(t) => {
                let ms = parse_time(t)?.as_millis();
                (ms >= 1000 && ms % 1000 == 0)
                    .then(|| u32::try_from(ms / 1000).ok())?
                    .map(Some)
            }
        }
    };
    let idle = secs(parts.next())?;
    let intvl = secs(parts.next())?;
    let cnt = match parts.next() {
        None | Some("") => None,
        Some(n) => Some(n.parse::<u32>().ok().filter(|n| *n > 0)?),
    };
    if parts.next().is_some() || (idle.is_none() && intvl.is_none() && cnt.is_none()) {
        return None;
    }
    Some(Keepalive::On { idle, intvl, cnt })
}

/// `8080`, `*:8080`, `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`, `127.0.0.1` (port 80).
/// The error is nginx's reason: "invalid port", "host not found", "invalid address".
pub fn parse_listen_addr(a: &str) -> Result<SocketAddr, &'static str> {
    const BAD_PORT: &str = "invalid port";
    let port_of = |p: &str| -> Result<u16, &'static str> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(BAD_PORT);
        }
        p.parse::<u16>().ok().filter(|n| *n != 0).ok_or(BAD_PORT)
    };
    // A bare number is always a port (never an IPv4 address written as an integer).
    if !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port_of(a)?,
        ));
    }
    if let Some(rest) = a.strip_prefix('[') {
        let (ip, after) = rest.split_once(']').ok_or("invalid address")?;
        let ip: std::net::Ipv6Addr = ip.parse().map_err(|_| "invalid IPv6 address")?;
        let port = match after {
            "" => 80,
            p => port_of(p.strip_prefix(':').ok_or("invalid address")?)?,
        };
        return Ok(SocketAddr::new(IpAddr::V6(ip), port));
    }
    let (host, port) = match a.rsplit_once(':') {
        Some((h, p)) => (h, port_of(p)?),
        None => (a, 80),
    };
    if host == "*" {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if host.is_empty() || host.contains(':') {
        return Err("invalid address");
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(SocketAddr::new(IpAddr::V4(ip), port));
    }
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.find(SocketAddr::is_ipv4))
        .ok_or("host not found")
}

fn location(d: &Directive, e: &mut Env) -> Result<LocationConf, ConfError> {
    let (kind, pattern) = match (d.args.len(), d.arg(0)) {
        (2, "=") => (LocKind::Exact, d.arg(1)),
        (2, "^~") => (LocKind::PrefixNoRegex, d.arg(1)),
        (2, "~") => (LocKind::Regex { caseless: false }, d.arg(1)),
        (2, "~*") => (LocKind::Regex { caseless: true }, d.arg(1)),
        (2, m) => {
            return Err(ConfError::new(
                format!("invalid location modifier \"{m}\""),
                &d.span,
            ));
        }
        (_, a) => {
            if let Some(rest) = a.strip_prefix('=') {
                (LocKind::Exact, rest)
            } else if let Some(rest) = a.strip_prefix("~*") {
                (LocKind::Regex { caseless: true }, rest)
            } else if let Some(rest) = a.strip_prefix('~') {
                (LocKind::Regex { caseless: false }, rest)
            } else if let Some(rest) = a.strip_prefix("^~") {
                (LocKind::PrefixNoRegex, rest)
            } else if a.starts_with('@') {
                (LocKind::Named, a)
            } else {
                (LocKind::Prefix, a)
            }
        }
    };
    let regex = match kind {
        LocKind::Regex { caseless } => Some(
            crate::core::vars::Re::new(pattern, caseless, &mut e.vars)
                .map_err(|e| ConfError::new(e, &d.span))?,
        ),
        _ => None,
    };
    Ok(LocationConf::new(
        kind,
        pattern.to_string(),
        regex,
        d.span.clone(),
    ))
}

/// The methods `limit_except` knows, as nginx.
const LIMIT_EXCEPT_METHODS: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "DELETE",
    "MKCOL",
    "COPY",
    "MOVE",
    "OPTIONS",
    "PROPFIND",
    "PROPPATCH",
    "LOCK",
    "UNLOCK",
    "PATCH",
];

fn limit_except(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let Scope::Location(l) = s else {
        unreachable!("table declares limit_except for location only")
    };
    if l.limit_except.is_some() {
        return Err(ConfError::new(
            "\"limit_except\" directive is duplicate",
            &d.span,
        ));
    }
    let mut methods = Vec::new();
    for a in d.arg_strs() {
        let m = LIMIT_EXCEPT_METHODS
            .iter()
            .find(|m| **m == a)
            .ok_or_else(|| ConfError::new(format!("invalid method \"{a}\""), &d.span))?;
        methods.push(*m);
        if *m == "GET" {
            methods.push("HEAD");
        }
    }
    let mut inner = l.block(d.span.clone());
    e.walk(block(d), &mut Scope::LimitExcept(&mut inner))?;
    e.vars.at(&d.span);
    l.limit_except = Some(Box::new((methods, inner)));
    Ok(())
}

/// An `alias` with variables, or in a regex location (where the alias is
/// the whole file name), is rendered per request.
fn alias_vars(loc: &mut LocationConf, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let Some(alias) = &loc.alias else {
        return Ok(());
    };
    if alias.contains('$') {
        let t = crate::core::vars::Template::compile(alias, &mut e.vars)
            .map_err(|e| ConfError::new(e, &d.span))?;
        loc.phases.alias_vars = Some(t);
    }
    Ok(())
}

/// nginx's rules for a location inside a location.
fn nested_ok(parent: &LocationConf, child: &LocationConf, d: &Directive) -> Result<(), ConfError> {
    let err = |m: String| Err(ConfError::new(m, &d.span));
    match parent.kind {
        LocKind::Exact => {
            return err(format!(
                "location \"{}\" cannot be inside the exact location \"{}\"",
                child.pattern, parent.pattern
            ));
        }
        LocKind::Named => {
            return err(format!(
                "location \"{}\" cannot be inside the named location \"{}\"",
                child.pattern, parent.pattern
            ));
        }
        _ => {}
    }
    match child.kind {
        LocKind::Named => err(format!(
            "named location \"{}\" can be on the server level only",
            child.pattern
        )),
        LocKind::Prefix | LocKind::PrefixNoRegex | LocKind::Exact
            if matches!(parent.kind, LocKind::Prefix | LocKind::PrefixNoRegex)
                && !child.pattern.starts_with(&parent.pattern) =>
        {
            err(format!(
                "location \"{}\" is outside location \"{}\"",
                child.pattern, parent.pattern
            ))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        let ok = |a: &str| parse_listen_addr(a).unwrap().to_string();
        assert_eq!(ok("8080"), "0.0.0.0:8080");
        assert_eq!(ok("*:81"), "0.0.0.0:81");
        assert_eq!(ok("127.0.0.1:82"), "127.0.0.1:82");
        assert_eq!(ok("[::1]:83"), "[::1]:83");
        assert_eq!(ok("[::]"), "[::]:80");
        assert_eq!(ok("127.0.0.1"), "127.0.0.1:80");
        assert_eq!(ok("localhost:84"), "127.0.0.1:84");
        for bad in [
            "1.2.3.4:99999",
            "99999",
            "0",
            "1.2.3.4:0",
            "1.2.3.4:",
            "1.2.3.4:x",
            "[::1]:0",
            "*:-1",
        ] {
            assert_eq!(parse_listen_addr(bad), Err("invalid port"), "{bad}");
        }
        assert_eq!(parse_listen_addr("[::1"), Err("invalid address"));
        assert_eq!(parse_listen_addr("[zz]:80"), Err("invalid IPv6 address"));
        assert_eq!(parse_listen_addr("::1"), Err("invalid address"));
        assert_eq!(
            parse_listen_addr("no-such-host.invalid:80"),
            Err("host not found")
        );
    }
}
