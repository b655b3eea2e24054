//! Port-forward over SPDY (`portforward.k8s.io`): every forwarded connection is a pair of
//! streams, `error` and `data`, with the same `requestid`; each complete pair is dialled
//! into the pod and copied both ways, many pairs at once on one connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tracing::{debug, warn, Instrument};

use super::frame::RST_CANCEL;
use super::session::{self, IncomingStream};
use super::stream::{StreamReader, StreamWriter, MAX_DATA_CHUNK};
use crate::server::streaming::PortDialer;

/// How long a pair may stay incomplete (upstream's stream creation timeout).
pub(crate) const PAIR_TIMEOUT: Duration = Duration::from_secs(30);
/// When one direction of a forwarded connection ends, the other gets this long to finish
/// (containerd's socat-like grace).
pub(crate) const HALF_CLOSE_GRACE: Duration = Duration::from_secs(1);

const PORT: &str = "port";
const STREAM_TYPE: &str = "streamtype";
const REQUEST_ID: &str = "requestid";

/// Numbers connections in log lines and in the timeout message, which upstream prints
/// with its connection's address.
static CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Serves port-forward on the upgraded connection until the client closes it.
pub(crate) async fn port_forward<IO>(io: IO, dialer: Arc<dyn PortDialer>)
where
    IO: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let conn = CONNECTIONS.fetch_add(1, Ordering::Relaxed);
    let mut session = session::start(io);
    let pairs: Pairs = Arc::new(Mutex::new(HashMap::new()));
    while let Some(stream) = session.incoming.recv().await {
        let (port, kind) = match validate(&stream) {
            Ok(v) => v,
            Err(e) => {
                warn!(conn, stream_id = stream.id, error = %e, "port-forward stream refused");
                stream.refuse(RST_CANCEL).await;
                continue;
            }
        };
        let request_id = request_id(&stream, kind);
        let Ok(halves) = stream.accept().await else {
            break;
        };
        add_stream(conn, &pairs, &dialer, request_id, port, kind, halves);
    }
    debug!(conn, "port-forward connection closed");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Error,
    Data,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Error => "error",
            Kind::Data => "data",
        }
    }
}

/// Why a stream was refused: upstream's stream handler's checks, with its messages.
#[derive(Debug, thiserror::Error)]
enum StreamRefused {
    #[error("{PORT:?} header is required")]
    NoPort,
    #[error("unable to parse {port:?} as a port: {source}")]
    BadPort {
        port: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("port {port:?} must be > 0")]
    ZeroPort { port: String },
    #[error("{STREAM_TYPE:?} header is required")]
    NoStreamType,
    #[error("invalid stream type {0:?}")]
    BadStreamType(String),
}

/// The checks of upstream's stream handler.
fn validate(stream: &IncomingStream) -> Result<(u16, Kind), StreamRefused> {
    let port = stream.headers.get(PORT).unwrap_or("");
    if port.is_empty() {
        return Err(StreamRefused::NoPort);
    }
    let number: u16 = port.parse().map_err(|source| StreamRefused::BadPort {
        port: port.to_string(),
        source,
    })?;
    if number < 1 {
        return Err(StreamRefused::ZeroPort {
            port: port.to_string(),
        });
    }
    match stream.headers.get(STREAM_TYPE).unwrap_or("") {
        "" => Err(StreamRefused::NoStreamType),
        "error" => Ok((number, Kind::Error)),
        "data" => Ok((number, Kind::Data)),
        other => Err(StreamRefused::BadStreamType(other.to_string())),
    }
}

/// The stream's `requestid`; clients too old to send one get upstream's guess from the
/// stream ids (error = its id, data = its id - 2).
fn request_id(stream: &IncomingStream, kind: Kind) -> String {
    match stream.headers.get(REQUEST_ID) {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => match kind {
            Kind::Error => stream.id.to_string(),
            Kind::Data => (stream.id as i64 - 2).to_string(),
        },
    }
}

type Halves = (StreamReader, StreamWriter);
type Pairs = Arc<Mutex<HashMap<String, Pending>>>;

struct Pending {
    /// Tells this pair's timeout apart from a later pair that reuses the request id.
    serial: u64,
    port: u16,
    error: Option<Halves>,
    data: Option<Halves>,
}

static SERIALS: AtomicU64 = AtomicU64::new(0);

fn add_stream(
    conn: u64,
    pairs: &Pairs,
    dialer: &Arc<dyn PortDialer>,
    request_id: String,
    port: u16,
    kind: Kind,
    halves: Halves,
) {
    let mut map = pairs.lock().expect("pairs lock");
    let pending = map.entry(request_id.clone()).or_insert_with(|| {
        let serial = SERIALS.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(expire(conn, pairs.clone(), request_id.clone(), serial).in_current_span());
        Pending {
            serial,
            port,
            error: None,
            data: None,
        }
    });
    let slot = match kind {
        Kind::Error => &mut pending.error,
        Kind::Data => &mut pending.data,
    };
    if slot.is_some() {
        let msg = format!(
            "error processing stream for request {request_id}: {} stream already assigned",
            kind.name()
        );
        warn!(conn, %msg, "port-forward");
        // Upstream writes this on the pair's first error stream; here it goes on the
        // duplicate itself when that is an error stream (clients never send duplicates,
        // so the first pair goes on undisturbed).
        if kind == Kind::Error {
            let (_, mut w) = halves;
            let report = async move {
                let _ = w.write_all(msg.as_bytes()).await;
                let _ = w.shutdown().await;
            };
            tokio::spawn(report.in_current_span());
        }
        return;
    }
    *slot = Some(halves);
    if pending.error.is_some() && pending.data.is_some() {
        let p = map.remove(&request_id).expect("the entry just filled");
        let (error, data) = (p.error.expect("complete"), p.data.expect("complete"));
        let forwarding = forward(conn, dialer.clone(), p.port, request_id, error, data);
        tokio::spawn(forwarding.in_current_span());
    }
}

/// Gives up on a pair still incomplete after [`PAIR_TIMEOUT`].
async fn expire(conn: u64, pairs: Pairs, request_id: String, serial: u64) {
    tokio::time::sleep(PAIR_TIMEOUT).await;
    let expired = {
        let mut map = pairs.lock().expect("pairs lock");
        match map.get(&request_id) {
            Some(p) if p.serial == serial => map.remove(&request_id),
            _ => None,
        }
    };
    let Some(p) = expired else { return };
    let msg = format!("(conn={conn}, request={request_id}) timed out waiting for streams");
    warn!(conn, %msg, "port-forward");
    if let Some((_, mut w)) = p.error {
        let _ = w.write_all(msg.as_bytes()).await;
        let _ = w.shutdown().await;
    }
    if let Some((_, mut w)) = p.data {
        let _ = w.shutdown().await;
    }
}

async fn forward(
    conn: u64,
    dialer: Arc<dyn PortDialer>,
    port: u16,
    request_id: String,
    error: Halves,
    data: Halves,
) {
    let (_, mut error_w) = error;
    let (mut data_r, mut data_w) = data;
    match dialer.dial(port).await {
        Err(e) => {
            let msg = format!(
                "error forwarding port {port} to pod {}, uid {}: {e}",
                dialer.pod_sandbox_id(),
                dialer.pod_uid()
            );
            warn!(conn, request = %request_id, %msg, "port-forward");
            let _ = error_w.write_all(msg.as_bytes()).await;
        }
        Ok(tcp) => {
            let (tcp_r, mut tcp_w) = tcp.into_split();
            let mut tcp_r = BufReader::with_capacity(MAX_DATA_CHUNK, tcp_r);
            let to_pod = async {
                let r = tokio::io::copy(&mut data_r, &mut tcp_w).await;
                let _ = tcp_w.shutdown().await;
                r
            };
            let from_pod = async {
                let r = tokio::io::copy_buf(&mut tcp_r, &mut data_w).await;
                let _ = data_w.shutdown().await;
                r
            };
            tokio::pin!(to_pod, from_pod);
            let (first, rest) = tokio::select! {
                r = &mut to_pod => ("to the pod", r),
                r = &mut from_pod => ("from the pod", r),
            };
            debug!(conn, request = %request_id, port, direction = first, result = ?rest, "port-forward copy ended");
            let other = if first == "to the pod" {
                tokio::time::timeout(HALF_CLOSE_GRACE, &mut from_pod)
                    .await
                    .ok()
            } else {
                tokio::time::timeout(HALF_CLOSE_GRACE, &mut to_pod)
                    .await
                    .ok()
            };
            if other.is_none() {
                debug!(conn, request = %request_id, port, "port-forward: the other direction cut off after the grace");
            }
        }
    }
    let _ = data_w.shutdown().await;
    let _ = error_w.shutdown().await;
}
