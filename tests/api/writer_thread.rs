//! Where a delivery's transaction runs (`store::writer_thread`): on SQLite
//! on the store's writer thread, one delivery after another on one thread;
//! on PostgreSQL on the HTTP worker that read it. Either way it runs to its
//! end when the sender hangs up, and a repeat then gets its stored answer.

use crate::helpers::{Backend, TestApp, payment, until};
use crate::on_both_backends;
use futures_util::future::join_all;
use idempotent_receiver::handlers::{Event, Handler, HandlerError};
use idempotent_receiver::store::{COMPLETED, DbConn};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Notes the name of the thread each delivery's handlers run on.
#[derive(Default)]
struct Threads(Mutex<Vec<String>>);

struct NoteThread(Arc<Threads>);

#[async_trait::async_trait(?Send)]
impl Handler for NoteThread {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        self.0
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name);
        Ok(None)
    }
}

async fn deliveries_run_on_the_backends_thread(backend: Backend) {
    let threads = Arc::new(Threads::default());
    let Some(app) = TestApp::builder(backend)
        .handler("note_thread", NoteThread(threads.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let app = &app;
    let statuses = join_all((0..12).map(|i| async move {
        let body = payment(&format!("pay_w{i}"), 100 + i);
        app.deliver(&format!("msg_w{i:02}"), &body)
            .await
            .status()
            .as_u16()
    }))
    .await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(app.ledger_rows().await, 12);

    let names = threads
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    assert_eq!(names.len(), 12, "each delivery ran its handlers once");
    match backend {
        Backend::Sqlite => assert!(
            names.iter().all(|n| n == "sqlite-writer"),
            "every SQLite delivery on the writer thread: {names:?}"
        ),
        Backend::Postgres => assert!(
            names.iter().all(|n| n.starts_with("actix-server worker")),
            "every PostgreSQL delivery on an HTTP worker: {names:?}"
        ),
    }
}

on_both_backends!(
    deliveries_run_on_the_backends_thread_,
    deliveries_run_on_the_backends_thread
);

/// Holds every delivery inside its transaction until `go` is set.
#[derive(Default)]
struct Gate {
    entered: AtomicBool,
    go: AtomicBool,
}

struct HoldUntilGo(Arc<Gate>);

#[async_trait::async_trait(?Send)]
impl Handler for HoldUntilGo {
    async fn handle(&self, _: &Event, _: &mut DbConn) -> Result<Option<Value>, HandlerError> {
        self.0.entered.store(true, Ordering::SeqCst);
        while !self.0.go.load(Ordering::SeqCst) {
            tokio::task::yield_now().await;
        }
        Ok(Some(serde_json::json!({ "held": true })))
    }
}

/// The sender hangs up while its delivery is inside the transaction: the
/// delivery still completes, with its one effect, and the provider's retry
/// gets the stored answer without running anything again.
async fn a_delivery_whose_sender_hangs_up_completes(backend: Backend) {
    let gate = Arc::new(Gate::default());
    let Some(app) = TestApp::builder(backend)
        .handler("hold_until_go", HoldUntilGo(gate.clone()))
        .spawn_if_available()
        .await
    else {
        return;
    };
    let body = payment("pay_hangup", 4200);
    tokio::select! {
        _ = app.deliver("msg_hangup", &body) => panic!("answered while held"),
        () = until("the delivery is inside its transaction", async || gate.entered.load(Ordering::SeqCst)) => {}
    }
    // The request's future is dropped: the client closed its connection.
    gate.go.store(true, Ordering::SeqCst);
    until("the abandoned delivery completes", async || {
        app.delivery("msg_hangup")
            .await
            .is_some_and(|row| row.status == COMPLETED)
    })
    .await;
    assert_eq!(app.ledger_rows().await, 1);

    let retry = app.deliver("msg_hangup", &body).await;
    assert_eq!(retry.status(), 200);
    let answer: Value = retry.json().await.expect("a JSON answer");
    assert_eq!(answer["effects"]["hold_until_go"]["held"], true, "{answer}");
    assert_eq!(app.ledger_rows().await, 1, "the retry ran nothing");
}

on_both_backends!(
    a_delivery_whose_sender_hangs_up_completes_,
    a_delivery_whose_sender_hangs_up_completes
);
