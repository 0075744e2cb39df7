//! The cost of the connections alone: an HTTP/1.1 server on hyper (what
//! hookbox's axum runs on), with tokio's multi-threaded runtime as hookbox
//! has, that reads each request's body and answers `202` with nothing
//! else done.

use std::convert::Infallible;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Serves until the process is killed. Prints the bound address first
/// (`listen` may ask for port 0).
pub fn serve(listen: SocketAddr) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        println!("listening on {}", listener.local_addr()?);
        accept_loop(listener).await;
        Ok(())
    })
}

async fn accept_loop(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        // As hookbox does: an answer must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(answer);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(req: Request<Incoming>) -> Result<Response<Empty<Bytes>>, Infallible> {
    let read = req.into_body().collect().await.map(|b| b.to_bytes());
    let status = match read {
        Ok(body) if !body.is_empty() => StatusCode::ACCEPTED,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_post_with_a_body_is_answered_202_and_an_empty_one_400() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(super::accept_loop(listener));
        let status = |body: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /hooks/github HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(body.as_bytes()).await.unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).await.unwrap();
            answer.lines().next().unwrap_or_default().to_owned()
        };
        assert_eq!(status("{\"zen\":\"x\"}").await, "HTTP/1.1 202 Accepted");
        assert_eq!(status("").await, "HTTP/1.1 400 Bad Request");
    }
}
