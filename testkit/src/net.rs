//! Loopback networking for tests: a free port to hand to a process, and a plain HTTP/1.1
//! GET for the gateway's admin endpoints (which need no signature).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it for a listener that
/// is closed again), for a process that must be told its port before it starts.
///
/// # Panics
/// When the loopback interface cannot be bound.
#[must_use]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a loopback port")
        .port()
}

/// `GET path` on `127.0.0.1:port`: the whole response (status line, headers, body) as
/// text, or `None` when nothing answers.
#[must_use]
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}
