//! The exporter's HTTP side: `/metrics` (OpenMetrics text when the scraper
//! asks for it, as Prometheus does, else the classic text format), `/-/healthy`,
//! and `/`, a page naming them; over TLS and behind basic auth where the
//! web configuration file says (`web_config.rs`). HTTP/1.1 is hyper's; one
//! request per connection, bounded in size and time: a slow or broken
//! client cannot hold the exporter.

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::Incoming,
    header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, NoLabelSet},
    metrics::MetricType,
    registry::{Registry, Unit as PromUnit},
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::TcpListener,
    sync::Mutex,
};

use super::{Exporter, series::Series, web_config::WebConfig};
use crate::exposition::{Family, Kind, SUM, Unit};

/// A request's head may be no larger (hyper answers 431), and must come
/// within this long (else the connection is closed); a TLS handshake too.
const MAX_HEAD: usize = 16 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A whole connection, the answer written included: a client that stops
/// reading cannot hold it longer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

const INDEX: &str = "<!DOCTYPE html><html><head><title>vtrace</title></head><body>\
<h1>vtrace serve</h1><p>Where the CPU and the latency go along the virtualization I/O path, per platform \
instance and role.</p><ul><li><a href=\"/metrics\">/metrics</a>: the series (OpenMetrics or Prometheus text)</li>\
<li><a href=\"/-/healthy\">/-/healthy</a>: 200 while the probes are attached</li></ul></body></html>\n";

/// Serves `listener` until the process ends.
pub async fn serve(listener: TcpListener, exporter: Arc<Mutex<Exporter>>, web: Arc<WebConfig>) {
    let tls = web.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (exporter, web, tls) = (exporter.clone(), web.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                // The handshake is bounded like the request's head.
                Some(tls) => {
                    if let Ok(Ok(stream)) = tokio::time::timeout(HEAD_TIMEOUT, tls.accept(stream)).await {
                        connection(stream, exporter, web).await;
                    }
                }
                None => connection(stream, exporter, web).await,
            }
        });
    }
}

/// One connection: one request, its head bounded in size and time.
async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    exporter: Arc<Mutex<Exporter>>,
    web: Arc<WebConfig>,
) {
    let service = service_fn(move |req| answer(req, exporter.clone(), web.clone()));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        // A client that closes its side after its request still gets the answer.
        .half_close(true)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
}

async fn answer(
    req: Request<Incoming>,
    exporter: Arc<Mutex<Exporter>>,
    web: Arc<WebConfig>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let authorization = req.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !web.users.allows(authorization) {
        let mut r = reply(StatusCode::UNAUTHORIZED, "text/plain", "Unauthorized\n");
        // The challenge that makes a client send its credentials.
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"vtrace\", charset=\"UTF-8\""),
        );
        return Ok(r);
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n"));
    }
    Ok(match req.uri().path() {
        "/metrics" => {
            let openmetrics = req
                .headers()
                .get_all(hyper::header::ACCEPT)
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
            // A task of its own: a client that goes away mid-read (a scrape
            // timeout) cannot cancel the read, whose rows the live session
            // forgets once read.
            let read = tokio::spawn(async move {
                let mut exporter = exporter.lock_owned().await;
                match exporter.read().await {
                    Ok(()) => Ok(encode(exporter.series.iter(), openmetrics)),
                    Err(e) => Err(e.to_string()),
                }
            });
            match read.await {
                Ok(Ok(body)) => {
                    let kind = if openmetrics { OPENMETRICS } else { PROMETHEUS_TEXT };
                    reply(StatusCode::OK, kind, body)
                }
                Ok(Err(e)) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("vtrace: {e}\n")),
                Err(e) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("vtrace: the read failed: {e}\n"),
                ),
            }
        }
        "/-/healthy" => reply(StatusCode::OK, "text/plain", "vtrace is healthy.\n"),
        "/" => reply(StatusCode::OK, "text/html; charset=utf-8", INDEX),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /metrics\n"),
    })
}

fn reply(status: StatusCode, kind: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}

/// One family's series: label pairs and values in base units.
#[derive(Debug)]
struct Exposed {
    family: &'static Family,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// The series as one family each, for prometheus-client's encoders.
#[derive(Debug)]
struct Families(Vec<Exposed>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for Exposed { family, samples } in &self.0 {
            let unit = family.unit.map(|u| match u {
                Unit::Seconds => PromUnit::Seconds,
                Unit::Bytes => PromUnit::Bytes,
            });
            let metric_type = match family.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            // The name without its unit: the encoder appends it.
            let name = format!("vtrace_{}", family.name);
            let mut metric = encoder.encode_descriptor(&name, family.help, unit.as_ref(), metric_type)?;
            if family.kind == Kind::Histogram {
                for (labels, (sum, buckets)) in histograms(samples) {
                    let count = buckets.iter().map(|(_, n)| n).sum();
                    metric
                        .encode_family(&labels)?
                        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
                }
                continue;
            }
            for (labels, value) in samples {
                let mut one = metric.encode_family(labels)?;
                match family.kind {
                    Kind::Counter => one.encode_counter::<NoLabelSet, f64, f64>(value, None)?,
                    _ => one.encode_gauge(value)?,
                }
            }
        }
        Ok(())
    }
}

/// A histogram family's parts (label `le`: a bucket's upper bound, or the
/// sum) as one histogram per label set: its sum and its buckets in order
/// of their bounds.
#[allow(clippy::type_complexity)]
fn histograms(samples: &[(Vec<(String, String)>, f64)]) -> Vec<(Vec<(String, String)>, (f64, Vec<(f64, u64)>))> {
    let mut out: Vec<(Vec<(String, String)>, (f64, Vec<(f64, u64)>))> = Vec::new();
    for (labels, value) in samples {
        let (rest, le): (Vec<_>, Vec<_>) = labels.iter().cloned().partition(|(k, _)| k != "le");
        let Some((_, le)) = le.first() else { continue };
        let at = match out.iter().position(|(l, _)| *l == rest) {
            Some(i) => i,
            None => {
                out.push((rest, (0.0, Vec::new())));
                out.len() - 1
            }
        };
        let (sum, buckets) = &mut out[at].1;
        match le.parse::<f64>() {
            Ok(bound) => buckets.push((bound, *value as u64)),
            Err(_) if le == SUM => *sum = *value,
            Err(_) => {}
        }
    }
    for (_, (_, buckets)) in &mut out {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Both formats need the +Inf bucket (histogram_quantile is NaN
        // without it); prometheus-client's OpenMetrics encoder adds none.
        if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
            buckets.push((f64::INFINITY, 0));
        }
    }
    out
}

/// The exposition: OpenMetrics text, or Prometheus's classic text format.
pub fn encode<'a>(series: impl Iterator<Item = &'a Series>, openmetrics: bool) -> String {
    let mut families: Vec<Exposed> = Vec::new();
    for s in series {
        if families.last().is_none_or(|f| !std::ptr::eq(f.family, s.family)) {
            families.push(Exposed {
                family: s.family,
                samples: Vec::new(),
            });
        }
        let labels = s.labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let exposed = families.last_mut().expect("pushed");
        // Bucket counts are counts; every other value is in sample units.
        let is_bucket = s.family.kind == Kind::Histogram && s.labels.iter().any(|(k, v)| *k == "le" && v != SUM);
        let value = if is_bucket {
            s.value
        } else {
            s.value / s.family.per_unit
        };
        exposed.samples.push((labels, value));
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Families(families)));
    let mut out = String::new();
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &registry)
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
    };
    encoded.expect("writing to a String");
    out
}
