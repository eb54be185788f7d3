//! OTLP metrics export (`tracer daemon --otlp URL`): the numbers the Prometheus endpoint
//! shows ([`metrics::samples`]), sent to an OpenTelemetry collector as OTLP/HTTP with
//! protobuf bodies (`POST /v1/metrics`, an `ExportMetricsServiceRequest`).
//!
//! The messages are opentelemetry-proto's; the transport is one HTTP/1.1 request per
//! export on a plain TCP connection (`http://` collectors; no TLS). Counters are cumulative
//! sums from the daemon's start, gauges the value as things stand, as in the Prometheus text.

use std::{
    io::{Read as _, Write as _},
    net::{TcpStream, ToSocketAddrs as _},
    time::Duration,
};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value},
    metrics::v1::{
        AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric, number_data_point,
    },
    resource::v1::Resource,
};
use prost::Message as _;

use crate::daemon::metrics::{Kind, Sample};

/// Longest an export may take, connection included.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("{0}: an OTLP endpoint is http://HOST:PORT[/PATH] (no TLS)")]
    BadEndpoint(String),
    #[error("cannot send metrics to {endpoint}")]
    Io {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the collector at {endpoint} answered: {status}")]
    Refused { endpoint: String, status: String },
}

/// Where a collector takes metrics: `http://HOST:PORT/PATH`, the path `/v1/metrics` when none
/// is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host_port: String,
    pub path: String,
}

impl std::str::FromStr for Endpoint {
    type Err = OtlpError;

    fn from_str(url: &str) -> Result<Self, OtlpError> {
        let bad = || OtlpError::BadEndpoint(url.to_owned());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (host_port, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/v1/metrics"),
        };
        let (host, port) = host_port.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad());
        }
        Ok(Endpoint {
            host_port: host_port.to_owned(),
            path: if path == "/" { "/v1/metrics" } else { path }.to_owned(),
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.host_port, self.path)
    }
}

fn string(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
    }
}

/// One sample as a data point at `now_unix_ns`; a counter's counts from `start_unix_ns`.
fn point(sample: &Sample, start_unix_ns: u64, now_unix_ns: u64) -> NumberDataPoint {
    NumberDataPoint {
        attributes: sample
            .labels
            .iter()
            .map(|(key, value)| string(key, value.clone()))
            .collect(),
        start_time_unix_nano: if sample.kind == Kind::Counter {
            start_unix_ns
        } else {
            0
        },
        time_unix_nano: now_unix_ns,
        value: Some(number_data_point::Value::AsInt(
            i64::try_from(sample.value).unwrap_or(i64::MAX),
        )),
        ..Default::default()
    }
}

/// An empty metric for the family of `sample`, named `name`: a cumulative monotonic sum for
/// a counter, a gauge for a gauge; bytes in `By`.
fn metric_of(sample: &Sample, name: String) -> Metric {
    Metric {
        name,
        description: sample.help.to_owned(),
        unit: if sample.name.ends_with("bytes") {
            "By"
        } else {
            "1"
        }
        .to_owned(),
        data: Some(match sample.kind {
            Kind::Counter => metric::Data::Sum(Sum {
                data_points: Vec::new(),
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            }),
            Kind::Gauge => metric::Data::Gauge(Gauge {
                data_points: Vec::new(),
            }),
        }),
        ..Default::default()
    }
}

/// The samples as one export request: a metric per name (`hotpin.` and the name), a point
/// per label set, counters as cumulative monotonic sums since `start_unix_ns`.
pub fn request(
    samples: &[Sample],
    start_unix_ns: u64,
    now_unix_ns: u64,
) -> ExportMetricsServiceRequest {
    let mut metrics: Vec<Metric> = Vec::new();
    for sample in samples {
        let name = format!("hotpin.{}", sample.name);
        let at = match metrics.iter().position(|m| m.name == name) {
            Some(at) => at,
            None => {
                metrics.push(metric_of(sample, name));
                metrics.len() - 1
            }
        };
        let point = point(sample, start_unix_ns, now_unix_ns);
        match metrics.get_mut(at).and_then(|m| m.data.as_mut()) {
            Some(metric::Data::Sum(sum)) => sum.data_points.push(point),
            Some(metric::Data::Gauge(gauge)) => gauge.data_points.push(point),
            _ => {}
        }
    }
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    string("service.name", "hotpin-tracer".to_owned()),
                    string(
                        "host.name",
                        hotpin_history::files::host_name().unwrap_or_default(),
                    ),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "hotpin".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends one export request; the collector must answer 2xx.
pub fn send(endpoint: &Endpoint, request: &ExportMetricsServiceRequest) -> Result<(), OtlpError> {
    let io = |source| OtlpError::Io {
        endpoint: endpoint.to_string(),
        source,
    };
    let body = request.encode_to_vec();
    let address = endpoint
        .host_port
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| OtlpError::BadEndpoint(endpoint.to_string()))?;
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT).map_err(io)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        endpoint.host_port,
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(&body).map_err(io)?;
    // The status line is enough: the body of a 2xx answer carries only partial successes.
    let mut answer = Vec::new();
    let mut buffer = [0u8; 512];
    while !answer.contains(&b'\n') {
        let read = stream.read(&mut buffer).map_err(io)?;
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..read]);
    }
    let status = String::from_utf8_lossy(&answer)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    match status.split_whitespace().nth(1) {
        Some(code) if code.starts_with('2') => Ok(()),
        _ => Err(OtlpError::Refused {
            endpoint: endpoint.to_string(),
            status: if status.is_empty() {
                "nothing".to_owned()
            } else {
                status
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::metrics::{FinishedPrograms, RunningRun, TracerNumbers, Traffic, samples};

    #[test]
    fn endpoints_are_http_urls_with_the_metrics_path_by_default() {
        let endpoint: Endpoint = "http://127.0.0.1:4318".parse().expect("an endpoint");
        assert_eq!(endpoint.path, "/v1/metrics");
        assert_eq!(endpoint.to_string(), "http://127.0.0.1:4318/v1/metrics");
        let endpoint: Endpoint = "http://collector:4318/otlp/v1/metrics"
            .parse()
            .expect("one");
        assert_eq!(endpoint.path, "/otlp/v1/metrics");
        for bad in [
            "https://x:4318",
            "127.0.0.1:4318",
            "http://x",
            "http://:4318",
            "http://x:99999",
        ] {
            let error = bad.parse::<Endpoint>().expect_err(bad);
            assert!(error.to_string().contains("no TLS"), "{error}");
        }
    }

    #[test]
    fn counters_are_cumulative_sums_and_gauges_gauges() {
        let running = [RunningRun {
            program: "app-0123456789ab".into(),
            pid: 42,
            traffic: Traffic {
                h2d_transfers: 3,
                h2d_bytes: 300,
                pinned_bytes: 4096,
                ..Traffic::default()
            },
            leased_bytes: 0,
        }];
        let samples = samples(
            &running,
            &FinishedPrograms::default(),
            &TracerNumbers::default(),
        );
        let request = request(&samples, 10, 20);
        let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
        let transfers = metrics
            .iter()
            .find(|m| m.name == "hotpin.transfers")
            .expect("transfers");
        let Some(metric::Data::Sum(sum)) = &transfers.data else {
            panic!("a sum: {transfers:?}");
        };
        assert!(sum.is_monotonic);
        assert_eq!(sum.data_points.len(), 2, "h2d and d2h");
        let h2d = &sum.data_points[0];
        assert_eq!(h2d.value, Some(number_data_point::Value::AsInt(3)));
        assert_eq!((h2d.start_time_unix_nano, h2d.time_unix_nano), (10, 20));
        let host = metrics
            .iter()
            .find(|m| m.name == "hotpin.host_memory_bytes")
            .expect("host memory");
        assert_eq!(host.unit, "By");
        assert!(matches!(&host.data, Some(metric::Data::Gauge(g)) if g.data_points.len() == 3));
        // One metric per name, whatever the number of label sets.
        let mut names: Vec<_> = metrics.iter().map(|m| &m.name).collect();
        names.dedup();
        assert_eq!(names.len(), metrics.len());
    }
}
