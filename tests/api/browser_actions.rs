//! An action from the admin page in a real headless Chromium (issue #16,
//! item 7): an operator logged in with the named token `ops` clicks
//! Reprocess on a key page and the database records it as `admin:ops`; a
//! page of another origin (a second local server, on another port) that
//! posts the same form with the operator's cookie is refused and changes
//! nothing. Skipped as browser.rs's tests are where no Chromium is found.

use crate::admin_actions::{OPS_TOKEN, history, named, note};
use crate::both_backends_with;
use crate::cdp::{self, Browser};
use crate::helpers::ENDPOINT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves `page` to every request on a port of its own: another origin
/// than the admin page's (same host, another port: the same *site*, so
/// the `SameSite=Strict` cookie does go along, and only the origin check
/// stands between the page and the action).
async fn attacker(page: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    address
}

both_backends_with! { named;
    async fn an_operator_reprocesses_from_the_key_page_and_a_cross_site_form_is_refused(app) {
        let Some(executable) = cdp::executable().or_else(|| {
            assert!(
                !std::env::var("IR_REQUIRE_BROWSER").is_ok_and(|v| v == "1" || v == "true"),
                "IR_REQUIRE_BROWSER is set but no Chromium is installed"
            );
            None
        }) else {
            return;
        };
        for id in ["msg_c1", "msg_c2"] {
            assert_eq!(app.deliver(id, &note(id)).await.status(), 200);
        }
        let mut browser = Browser::launch(&executable).await.expect("Chromium starts");
        let admin = app.admin_address.clone();
        browser.goto(&format!("{admin}/admin/login")).await.unwrap();
        browser.fill("#token", OPS_TOKEN).await.unwrap();
        browser.click("#login").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin");

        // Reprocess from the key page: back on it, with the outcome.
        browser.goto(&format!("{admin}/admin/view/shop/msg_c1")).await.unwrap();
        assert!(history(app, ENDPOINT, "msg_c1").await.is_empty());
        browser.click("#reprocess").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/view/shop/msg_c1");
        let notice = browser.text("#action-done").await.unwrap();
        assert!(notice.contains("answered 200"), "{notice}");
        assert_eq!(history(app, ENDPOINT, "msg_c1").await, [("reprocessed".to_owned(), "admin:ops".to_owned())]);
        assert_eq!(app.delivery("msg_c1").await.unwrap().attempts, 2);
        let actors = browser.texts("#history tbody td:nth-child(3)").await.unwrap();
        assert_eq!(actors, ["admin:ops"]);
        browser.screenshot("action-done-1280").await.unwrap();

        // Another origin's page posts the same form for msg_c2 with a click.
        let forged = attacker(format!(
            "<!doctype html><title>win a prize</title><form method=post action=\"{admin}/admin/reprocess\">\
             <input type=hidden name=endpoint value=shop><input type=hidden name=delivery_id value=msg_c2>\
             <button id=go>Claim</button></form>"
        ))
        .await;
        browser.goto(&forged).await.unwrap();
        browser.click("#go").await.unwrap();
        assert_eq!(browser.path().await.unwrap(), "/admin/reprocess");
        let refusal = browser.text("body").await.unwrap();
        assert!(refusal.contains("cross-site"), "{refusal}");
        assert!(history(app, ENDPOINT, "msg_c2").await.is_empty(), "nothing recorded");
        assert_eq!(app.delivery("msg_c2").await.unwrap().attempts, 1, "nothing ran");
    }
}
