//! Audit records as OTLP messages: one log record each (the record as its
//! body, its `seq`, hash and `prev` as attributes), and optionally one span per
//! finished call, named and attributed after the MCP semantic conventions for
//! `tools/call`. Argument values leave only where the policy says `arguments =
//! "values"`; otherwise their shape does (key names, JSON types, lengths).

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span, status};
use serde_json::Value;
use sha2::{Digest, Sha256};
use warden_policy::otlp::Arguments;

use crate::reader::Line;

/// The instrumentation scope of every record.
pub const SCOPE: &str = "warden.audit";
/// The event name of every log record.
pub const EVENT: &str = "warden.audit.call";
/// How deep a body or shape goes; deeper values are cut to a note.
const MAX_DEPTH: usize = 16;
/// How many elements of an array the shape shows.
const SHAPE_ELEMENTS: usize = 32;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue { key: key.to_string(), value: Some(AnyValue { value: Some(value) }), ..Default::default() }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.to_string())
}

/// `v` as an OTLP value: objects as key-value lists, arrays as arrays.
pub(crate) fn any_value(v: &Value, depth: usize) -> AnyValue {
    use any_value::Value as A;
    let value = match v {
        _ if depth >= MAX_DEPTH => A::StringValue("…(nested too deep)".into()),
        Value::Null => return AnyValue { value: None },
        Value::Bool(b) => A::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => A::IntValue(i),
            None => A::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(t) => A::StringValue(t.clone()),
        Value::Array(a) => A::ArrayValue(ArrayValue { values: a.iter().map(|e| any_value(e, depth + 1)).collect() }),
        Value::Object(o) => A::KvlistValue(KeyValueList {
            values: o
                .iter()
                .map(|(k, e)| KeyValue { key: k.clone(), value: Some(any_value(e, depth + 1)), ..Default::default() })
                .collect(),
        }),
    };
    AnyValue { value: Some(value) }
}

/// The shape of `v`: each string as `"string(N)"` (N characters), numbers,
/// booleans and nulls by type, objects by their keys, arrays by their first
/// elements' shapes.
pub fn shape(v: &Value, depth: usize) -> Value {
    match v {
        _ if depth >= MAX_DEPTH => Value::from("…(nested too deep)"),
        Value::Null => Value::from("null"),
        Value::Bool(_) => Value::from("boolean"),
        Value::Number(_) => Value::from("number"),
        Value::String(t) => Value::from(format!("string({})", t.chars().count())),
        Value::Array(a) => {
            let mut out: Vec<Value> = a.iter().take(SHAPE_ELEMENTS).map(|e| shape(e, depth + 1)).collect();
            if a.len() > SHAPE_ELEMENTS {
                out.push(Value::from(format!("…({} more)", a.len() - SHAPE_ELEMENTS)));
            }
            Value::Array(out)
        }
        Value::Object(o) => Value::Object(o.iter().map(|(k, e)| (k.clone(), shape(e, depth + 1))).collect()),
    }
}

fn str_of<'a>(r: &'a Value, key: &str) -> &'a str {
    r.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Nanoseconds since the epoch of the record's `ts` (0 if it has none).
fn start_nanos(r: &Value) -> u64 {
    humantime::parse_rfc3339_weak(str_of(r, "ts"))
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

fn now_nanos() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The trace and span ids of a call: derived from its call id, so that a
/// record sent again carries the same ones (and both records of a background
/// job, the same trace).
fn ids(call_id: &str) -> (Vec<u8>, Vec<u8>) {
    let t = Sha256::digest(format!("warden trace {call_id}").as_bytes());
    let s = Sha256::digest(format!("warden span {call_id}").as_bytes());
    (t[..16].to_vec(), s[..8].to_vec())
}

/// How severe a record is: a refusal (by the policy or a person) is a
/// warning, any other failure an error.
fn severity(r: &Value) -> (SeverityNumber, &'static str) {
    match (str_of(r, "decision"), str_of(r, "status")) {
        ("denied" | "rejected" | "approval_required", _) | (_, "rejected" | "cancelled") => {
            (SeverityNumber::Warn, "WARN")
        }
        (_, "error") => (SeverityNumber::Error, "ERROR"),
        _ => (SeverityNumber::Info, "INFO"),
    }
}

/// The attributes every log record and span of a call carries.
fn call_attributes(line: &Line) -> Vec<KeyValue> {
    use any_value::Value as A;
    let r = &line.record;
    let mut attrs = vec![
        kv("warden.audit.seq", A::IntValue(line.seq as i64)),
        kv("warden.audit.hash", s(&line.hash)),
        kv("warden.audit.prev", s(str_of(r, "prev"))),
        kv("warden.call.id", s(str_of(r, "call_id"))),
        kv("warden.decision", s(str_of(r, "decision"))),
        kv("warden.status", s(str_of(r, "status"))),
        kv("mcp.method.name", s("tools/call")),
        kv("gen_ai.operation.name", s("execute_tool")),
        kv("gen_ai.tool.name", s(str_of(r, "tool"))),
        kv("mcp.session.id", s(str_of(r, "session"))),
    ];
    if let Some(code) = r.get("error_code").and_then(Value::as_str) {
        attrs.push(kv("error.type", s(code)));
    }
    attrs
}

/// The record as exported: its arguments as the policy says.
fn body(line: &Line, arguments: Arguments) -> AnyValue {
    let mut record = line.record.clone();
    if arguments == Arguments::Shape
        && let Some(args) = record.get_mut("args")
    {
        *args = shape(args, 0);
    }
    any_value(&record, 0)
}

/// One log record for `line`; linked to its call's span when `spans`.
pub(crate) fn log_record(line: &Line, arguments: Arguments, spans: bool) -> LogRecord {
    let r = &line.record;
    let (severity, text) = severity(r);
    let (trace_id, span_id) = if spans { ids(str_of(r, "call_id")) } else { (Vec::new(), Vec::new()) };
    LogRecord {
        time_unix_nano: start_nanos(r),
        observed_time_unix_nano: now_nanos(),
        severity_number: severity as i32,
        severity_text: text.to_string(),
        body: Some(body(line, arguments)),
        attributes: call_attributes(line),
        flags: u32::from(spans),
        trace_id,
        span_id,
        event_name: EVENT.to_string(),
        ..Default::default()
    }
}

/// The span of a finished call (`None` for the start record of a background
/// job: its end record makes the span).
pub(crate) fn span(line: &Line) -> Option<Span> {
    let r = &line.record;
    let status_text = str_of(r, "status");
    if status_text == "running" {
        return None;
    }
    let start = start_nanos(r);
    let millis = r.get("duration_ms").and_then(Value::as_f64).unwrap_or(0.0).max(0.0);
    let (trace_id, span_id) = ids(str_of(r, "call_id"));
    let ok = status_text == "success" && str_of(r, "decision") == "allowed";
    let message = r.get("error_code").and_then(Value::as_str).unwrap_or(status_text);
    Some(Span {
        trace_id,
        span_id,
        flags: 1,
        name: format!("tools/call {}", str_of(r, "tool")),
        kind: span::SpanKind::Server as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: start + (millis * 1e6) as u64,
        attributes: call_attributes(line),
        status: Some(if ok {
            Status { code: status::StatusCode::Unset as i32, message: String::new() }
        } else {
            Status { code: status::StatusCode::Error as i32, message: message.to_string() }
        }),
        ..Default::default()
    })
}

fn resource(log: &str) -> Resource {
    let host = nix_hostname();
    Resource {
        attributes: vec![
            kv("service.name", s("warden")),
            kv("service.version", s(env!("CARGO_PKG_VERSION"))),
            kv("host.name", s(&host)),
            kv("warden.audit.log", s(log)),
        ],
        ..Default::default()
    }
}

fn nix_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
}

fn scope() -> InstrumentationScope {
    InstrumentationScope { name: SCOPE.into(), version: env!("CARGO_PKG_VERSION").into(), ..Default::default() }
}

/// The logs request of `lines`.
pub(crate) fn logs_request(lines: &[Line], log: &str, arguments: Arguments, spans: bool) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource(log)),
            scope_logs: vec![ScopeLogs {
                scope: Some(scope()),
                log_records: lines.iter().map(|l| log_record(l, arguments, spans)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The traces request of `lines` (`None` when none of them ends a call).
pub(crate) fn traces_request(lines: &[Line], log: &str) -> Option<ExportTraceServiceRequest> {
    let spans: Vec<Span> = lines.iter().filter_map(span).collect();
    (!spans.is_empty()).then(|| ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource(log)),
            scope_spans: vec![ScopeSpans { scope: Some(scope()), spans, ..Default::default() }],
            ..Default::default()
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_keeps_keys_and_types_only() {
        let v = serde_json::json!({"path": "/etc/passwd", "n": 3, "ok": true, "x": null, "list": ["ab", {"k": 1}]});
        assert_eq!(
            shape(&v, 0),
            serde_json::json!({"path": "string(11)", "n": "number", "ok": "boolean", "x": "null",
                "list": ["string(2)", {"k": "number"}]})
        );
    }

    #[test]
    fn refusals_warn_and_failures_are_errors() {
        let sev = |d: &str, st: &str| severity(&serde_json::json!({"decision": d, "status": st})).1;
        assert_eq!(sev("allowed", "success"), "INFO");
        assert_eq!(sev("denied", "error"), "WARN");
        assert_eq!(sev("denied", "rejected"), "WARN");
        assert_eq!(sev("rejected", "rejected"), "WARN");
        assert_eq!(sev("allowed", "error"), "ERROR");
    }
}
