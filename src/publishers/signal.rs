//! How the relay learns that publications were committed: this process's
//! deliveries bump a counter every relay task watches, after their
//! transaction committed (a wake-up before the commit would find nothing);
//! on PostgreSQL a notifier also tells other instances' relays, batched,
//! through `NOTIFY` (see `maintenance::relay`).

use std::sync::Arc;
use tokio::sync::{Notify, watch};

#[derive(Clone, Debug)]
pub struct OutboxSignal {
    wake: Arc<watch::Sender<u64>>,
    committed: Arc<Notify>,
}

impl Default for OutboxSignal {
    fn default() -> Self {
        OutboxSignal {
            wake: Arc::new(watch::channel(0).0),
            committed: Arc::default(),
        }
    }
}

impl OutboxSignal {
    /// Publications were committed here: wake this process's relays and
    /// the notifier for other instances.
    pub fn committed(&self) {
        self.wake_local();
        self.committed.notify_one();
    }

    /// Wake this process's relays only (another instance's `NOTIFY`, an
    /// operator's retry).
    pub fn wake_local(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// What one relay task waits on: `changed()` returns once per burst of
    /// wake-ups, and none is lost while the task is busy.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.wake.subscribe()
    }

    /// What the notifier waits on.
    pub fn committed_notify(&self) -> &Arc<Notify> {
        &self.committed
    }
}
