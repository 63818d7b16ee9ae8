//! A TCP proxy on 127.0.0.1 to a broker, for outage tests that must not
//! stop the shared broker: `cut()` drops every live connection and turns
//! new ones away (accepted, then closed at once), `restore()` lets them
//! through again. The port stays the same throughout, so a client keeps its
//! address and must reconnect by itself.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct CutProxy {
    addr: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

struct State {
    target: String,
    cut: AtomicBool,
    /// The tasks that pump the live connections; aborting one drops (and
    /// so closes) both of its sockets.
    links: Mutex<Vec<JoinHandle<()>>>,
    accepted: AtomicUsize,
}

impl CutProxy {
    /// Listens on 127.0.0.1:0 and forwards every connection to `target`.
    pub async fn start(target: &str) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the cut proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let state = Arc::new(State {
            target: target.to_owned(),
            cut: AtomicBool::new(false),
            links: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, state.clone()));
        CutProxy {
            addr,
            state,
            accept,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections let through so far (not those turned away while cut).
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// Drops every live connection and turns new ones away.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for link in self.state.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.accept.abort();
        for link in self.state.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        if state.cut.load(Ordering::SeqCst) {
            drop(inbound);
            continue;
        }
        let Ok(outbound) = TcpStream::connect(&state.target).await else {
            continue;
        };
        // Checked under the lock that `cut` drains: a connection cut while
        // it was being made goes too.
        let mut links = state.links.lock().unwrap();
        if state.cut.load(Ordering::SeqCst) {
            continue;
        }
        state.accepted.fetch_add(1, Ordering::SeqCst);
        links.retain(|l| !l.is_finished());
        links.push(tokio::spawn(pump(inbound, outbound)));
    }
}

async fn pump(mut inbound: TcpStream, mut outbound: TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
}
