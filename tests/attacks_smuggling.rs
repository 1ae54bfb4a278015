//! Request-smuggling variants against a running vireo, beyond the framing
//! cases of tests/http1.rs (TE + CL, duplicate/signed/hex Content-Length,
//! TE not ending in chunked, TE on HTTP/1.0, obs-fold, space before the
//! colon, bare CR/LF in heads, bad chunk sizes): each ambiguous message is
//! answered once with 400 (501 for a coding we do not implement) and the
//! connection closed, so a request hidden behind it is never served.
//!
//! Request bodies are never decoded (vireo ignores Content-Encoding on
//! requests and passes bodies on as they came), so a compressed body cannot
//! expand into a decompression bomb; see docs/fuzzing.md.

mod common;
use common::*;

fn server() -> Vireo {
    let dir = TempDir::new("smuggle");
    dir.write("html/a.txt", "hello");
    Vireo::start_in(dir, STATIC_CONF)
}

const POST: &str = "POST /a.txt HTTP/1.1\r\nHost: x\r\n";

/// A chunked POST head followed by `chunks`.
fn chunked(chunks: &[u8]) -> Vec<u8> {
    let mut r = format!("{POST}Transfer-Encoding: chunked\r\n\r\n").into_bytes();
    r.extend_from_slice(chunks);
    r
}

#[test]
fn transfer_encoding_spellings_are_refused() {
    let v = server();
    for te in [
        &b"Transfer-Encoding : chunked"[..],
        b"Transfer-Encoding\t: chunked",
        b"Transfer-Encoding:\r\n chunked",
        b"Transfer-Encoding: chunked\r\n\tchunked",
        b"Transfer-Encoding: \"chunked\"",
        b"Transfer-Encoding: chunked\x0b",
        b"Transfer-Encoding: \x0bchunked",
        b"Transfer-Encoding: chunk",
        b"Transfer-Encoding: chunked;q=1.0, identity",
        b"Transfer-Encoding: identity",
        b"Transfer-Encoding: identity, chunked",
        b"Transfer-Encoding: ,chunked",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        b"Transfer-Encoding: chunked\r\nContent-Length: 0",
        b"Content-Length: 0\r\nTransfer-Encoding: chunked",
        b"Content-Length: 5\r\nTransfer-Encoding: identity",
        b"Transfer-Encoding\0: chunked",
        b"Transfer-Encoding: chu\0nked",
    ] {
        let mut req = POST.as_bytes().to_vec();
        req.extend_from_slice(te);
        req.extend_from_slice(b"\r\n\r\n0\r\n\r\n");
        refused(&v, &req, &[400, 501]);
    }
}

#[test]
fn content_length_spellings_are_refused() {
    let v = server();
    for cl in [
        &b"Content-Length: 5\x0b"[..],
        b"Content-Length: \x0b5",
        b"Content-Length:\r\n 5",
        b"Content-Length: 5\r\n 0",
        b"Content-Length: \"5\"",
        b"Content-Length: 5e0",
        b"Content-Length: 5;",
        b"Content-Length: 5\r\nContent-Length: 05",
        b"Content-Length: 4294967301",
    ] {
        let mut req = POST.as_bytes().to_vec();
        req.extend_from_slice(cl);
        req.extend_from_slice(b"\r\n\r\nhello");
        // 4294967301 is 2^32 + 5: over client_max_body_size, so 413.
        refused(&v, &req, &[400, 413]);
    }
}

#[test]
fn chunk_lines_are_strict() {
    let v = server();
    for chunks in [
        // A bare CR in the size line, after the data, or ending the body.
        &b"3\rabc\r\n0\r\n\r\n"[..],
        b"3\r\nabc\r0\r\n\r\n",
        b"0\r\n\r\r\n",
        b"3;a=b\rx\nabc\r\n0\r\n\r\n",
        // Size spellings.
        b" 3\r\nabc\r\n0\r\n\r\n",
        b"+3\r\nabc\r\n0\r\n\r\n",
        b"3\0\r\nabc\r\n0\r\n\r\n",
        b"0000000000000000003\r\nabc\r\n0\r\n\r\n",
        b"3g\r\nabc\r\n0\r\n\r\n",
        // Extensions that are not token [= token / quoted-string].
        b"3;\r\nabc\r\n0\r\n\r\n",
        b"3;a=\"b\r\nabc\r\n0\r\n\r\n",
        b"3;a b\r\nabc\r\n0\r\n\r\n",
        // More data than the size says: the extra bytes are not a request.
        b"3\r\nabcGET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n0\r\n\r\n",
        // Trailers: obs-fold, no colon, bare CR.
        b"0\r\nX: a\r\n b\r\n\r\n",
        b"0\r\nNoColon\r\n\r\n",
        b"0\r\nX: a\rb\r\n\r\n",
    ] {
        refused(&v, &chunked(chunks), &[400]);
    }
}

#[test]
fn a_bare_lf_ends_chunk_lines_as_in_nginx_and_hides_no_request() {
    let v = server();
    for chunks in [
        &b"3;a=b\nabc\r\n0\r\n\r\n"[..],
        b"3\r\nabc\n0\r\n\r\n",
        b"0\n\n",
        b"0\r\n\n",
        b"3\nabc\n0\nX-T: 1\n\n",
    ] {
        let mut req = chunked(chunks);
        req.extend_from_slice(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let raw = v.raw(&req);
        let rs = Resp::parse_all(&raw);
        let show = String::from_utf8_lossy(chunks);
        assert_eq!(rs.len(), 2, "{show}: {}", String::from_utf8_lossy(&raw));
        assert_eq!(
            (rs[1].status, rs[1].text().as_str()),
            (200, "hello"),
            "{show}"
        );
    }
}

#[test]
fn hidden_request_after_a_valid_chunked_body_is_served_only_once() {
    // The control: a well-formed chunked body with extensions and a trailer
    // leaves the connection usable, and what follows is the next request.
    let v = server();
    let mut req = chunked(b"3;ext=\"v\"\r\nabc\r\n0\r\nX-T: 1\r\n\r\n");
    req.extend_from_slice(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let raw = v.raw(&req);
    let rs = Resp::parse_all(&raw);
    assert_eq!(rs.len(), 2, "{}", String::from_utf8_lossy(&raw));
    assert_eq!(rs[1].status, 200);
    assert_eq!(rs[1].text(), "hello");
}
