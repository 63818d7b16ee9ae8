//! `otlp-dump [ADDRESS]`: an OTLP/HTTP trace sink on ADDRESS (default
//! 127.0.0.1:4318, OTLP/HTTP's port) that prints every span it receives on
//! `POST /v1/traces` as one JSON line on stdout. For looking at the
//! receiver's traces without a tracing backend; not a collector (it keeps
//! nothing, forwards nothing and speaks neither gRPC nor JSON OTLP).

use actix_web::{App, HttpResponse, HttpServer, web};
use clap::Parser;
use std::io::Write;

/// An export batch's size limit: the SDK sends at most 512 spans at once,
/// far below this.
const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Parser)]
#[command(about = "Prints the spans sent to POST /v1/traces (OTLP/HTTP, protobuf) as JSON lines")]
struct Args {
    /// Where to listen.
    #[arg(default_value = "127.0.0.1:4318")]
    address: String,
}

async fn export(body: web::Bytes) -> HttpResponse {
    let Some(request) = otlp_dump::decode(&body) else {
        return HttpResponse::BadRequest().body("not an OTLP ExportTraceServiceRequest");
    };
    let mut stdout = std::io::stdout().lock();
    for span in otlp_dump::spans(&request) {
        // A closed stdout (`| head`) ends nothing: the sender still gets 200.
        let _ = writeln!(stdout, "{span}");
    }
    let _ = stdout.flush();
    // An empty ExportTraceServiceResponse: full success.
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .finish()
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = HttpServer::new(|| {
        App::new()
            .app_data(web::PayloadConfig::new(MAX_BODY))
            .route("/v1/traces", web::post().to(export))
    })
    .workers(1)
    .bind(&args.address)?;
    eprintln!("otlp-dump: listening on http://{}/v1/traces", args.address);
    server.run().await?;
    Ok(())
}
