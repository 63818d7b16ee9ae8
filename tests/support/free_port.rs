//! A port for a child process to listen on, never handed out twice in one
//! test process.
//!
//! The kernel only promises that nobody holds the port while we ask. The
//! tests of one binary run at once, and between our asking and the child's
//! bind another test could be handed the same port: one child then fails
//! to bind while the other test's child answers its `/readyz`. Remembering
//! what was handed out closes that race within the process; another
//! process taking the port is still possible and shows as the child exiting
//! before it is ready.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

pub fn free_port() -> std::io::Result<u16> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
}
