//! Conformance runner for sdk-rs: runs every conformance/scenarios/*.json against a live server
//! and writes DIR/rs.json (normalized results, see conformance/README.md); exits 1 when a step
//! fails. It follows the rules of the shared Go engine (conformance/internal/harness).
//!
//!     cd conformance/runner_rs && cargo run -- --base-url http://127.0.0.1:PORT --out DIR [--pages ORIGIN] [--scenarios DIR]

use bap::{CallOptions, Client, Error};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::exit;

const LANG: &str = "rs";
const PAGES: &str = "${PAGES}";
const ID_PREFIXES: &[&str] = &[
    "tsk", "bs", "ctx", "ep", "nd", "apr", "art", "chk", "cmd", "rcp", "evt", "rec",
];

/// What one call answered.
struct Outcome {
    status: Value,
    code: Value,
    doc: Value,
    err: Option<String>,
    /// The bytes of a binary answer (get_task_bundle's tar file), for verify_bundle.
    body: Option<Vec<u8>>,
}

/// Decodes the scenario body into the SDK's request type; a body the type cannot carry (an
/// unknown field, a value of another type) is a runner error: the fixture would not be
/// expressible through sdk-rs.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(args: &Map<String, Value>) -> Result<T, String> {
    let body = match args.get("body") {
        Some(Value::Null) | None => Value::Object(Map::new()),
        Some(b) => b.clone(),
    };
    let t: T = serde_json::from_value(body.clone())
        .map_err(|e| format!("body not expressible as {}: {}", std::any::type_name::<T>(), e))?;
    let back = serde_json::to_value(&t).map_err(|e| e.to_string())?;
    if !covers(&body, &back) {
        return Err(format!(
            "body not expressible as {}: {} became {}",
            std::any::type_name::<T>(),
            body,
            back
        ));
    }
    Ok(t)
}

/// Whether `got` holds everything `want` says (members that are null in `want` may be absent).
fn covers(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| v.is_null() || g.get(k).map_or(false, |gv| covers(v, gv))),
        (Value::Array(w), Value::Array(g)) => w.len() == g.len() && w.iter().zip(g).all(|(a, b)| covers(a, b)),
        _ => same(want, got),
    }
}

fn s<'a>(a: &'a Map<String, Value>, k: &str) -> &'a str {
    a.get(k).and_then(Value::as_str).unwrap_or("")
}

fn n(a: &Map<String, Value>, k: &str) -> Option<i64> {
    a.get(k)
        .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
}

fn doc<T: serde::Serialize>(r: Result<T, Error>) -> Result<Value, Error> {
    r.map(|v| serde_json::to_value(v).unwrap_or_else(|_| json!({})))
}

enum Failure {
    Sdk(Error),
    Runner(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Runner(s)
    }
}

fn call(c: &Client, op: &str, a: &Map<String, Value>, o: &CallOptions) -> Result<Value, Failure> {
    let r = match op {
        "create_task" => doc(c.create_task_with(&typed(a)?, o)),
        "get_task" => doc(c.get_task_with(s(a, "task_id"), o)),
        "list_task_events" => doc(c.list_task_events_with(s(a, "task_id"), n(a, "after"), n(a, "limit"), o)),
        "cancel_task" => doc(c.cancel_task_with(s(a, "task_id"), &typed(a)?, o)),
        "resume_task" => doc(c.resume_task_with(s(a, "task_id"), &typed(a)?, o)),
        "close_task" => doc(c.close_task_with(s(a, "task_id"), &typed(a)?, o)),
        "create_browser_session" => doc(c.create_browser_session_with(s(a, "task_id"), &typed(a)?, o)),
        "checkpoint_browser_session" => doc(c.checkpoint_browser_session_with(s(a, "session_id"), &typed(a)?, o)),
        "close_browser_session" => doc(c.close_browser_session_with(s(a, "session_id"), &typed(a)?, o)),
        "navigate" => doc(c.navigate_with(s(a, "session_id"), &typed(a)?, o)),
        "observe" => doc(c.observe_with(s(a, "session_id"), &typed(a)?, o)),
        "query_nodes" => doc(c.query_nodes_with(s(a, "session_id"), &typed(a)?, o)),
        "act" => doc(c.act_with(s(a, "session_id"), &typed(a)?, o)),
        "extract" => doc(c.extract_with(s(a, "session_id"), &typed(a)?, o)),
        "capture_evidence" => doc(c.capture_evidence_with(s(a, "session_id"), &typed(a)?, o)),
        "request_approval" => doc(c.request_approval_with(s(a, "task_id"), &typed(a)?, o)),
        "resolve_approval" => doc(c.resolve_approval_with(s(a, "approval_id"), &typed(a)?, o)),
        // The runner-neutral document of get_artifact (conformance/README.md).
        "get_artifact" => c
            .get_artifact_with(s(a, "artifact_id"), o)
            .map(|b| json!({"media_type": b.media_type, "sha256": b.sha256, "size": b.body.len()})),
        "verify_artifact" => doc(c.verify_artifact_with(s(a, "artifact_id"), &typed(a)?, o)),
        "get_task_audit" => doc(c.get_task_audit_with(s(a, "task_id"), o)),
        "replay_task" => doc(c.replay_task_with(s(a, "task_id"), &typed(a)?, o)),
        _ => return Err(Failure::Runner(format!("unknown op {}", op))),
    };
    r.map_err(Failure::Sdk)
}

fn run_call(c: &Client, op: &str, a: &Map<String, Value>, key: Option<String>) -> Outcome {
    let mut o = CallOptions::new();
    if let Some(k) = key {
        o = o.idempotency_key(k);
    }
    let answer = if op == "get_task_bundle" {
        // The runner-neutral document, with the bytes for verify_bundle.
        match c.get_task_bundle_with(s(a, "task_id"), &o) {
            Ok(b) => {
                let d = json!({"media_type": b.media_type, "sha256": b.sha256, "size": b.body.len()});
                return Outcome {
                    status: json!("ok"),
                    code: Value::Null,
                    doc: d,
                    err: None,
                    body: Some(b.body),
                };
            }
            Err(e) => Err(Failure::Sdk(e)),
        }
    } else {
        call(c, op, a, &o)
    };
    match answer {
        Ok(doc) => Outcome {
            status: json!("ok"),
            code: Value::Null,
            doc,
            err: None,
            body: None,
        },
        Err(Failure::Sdk(Error::Problem(p))) => Outcome {
            status: json!(p.status),
            code: p.code.as_ref().map_or(Value::Null, |c| json!(c.as_str())),
            doc: serde_json::from_slice(&p.body).unwrap_or_else(|_| json!({})),
            err: None,
            body: None,
        },
        Err(Failure::Sdk(e)) => Outcome {
            status: Value::Null,
            code: Value::Null,
            doc: Value::Null,
            err: Some(e.to_string()),
            body: None,
        },
        Err(Failure::Runner(e)) => Outcome {
            status: Value::Null,
            code: Value::Null,
            doc: Value::Null,
            err: Some(e),
            body: None,
        },
    }
}

/// RFC 6901; a missing member answers null.
fn pointer<'a>(doc: &'a Value, ptr: &str) -> Option<&'a Value> {
    if ptr.is_empty() {
        return Some(doc);
    }
    let mut cur = doc;
    for tok in ptr[1..].split('/') {
        let tok = tok.replace("~1", "/").replace("~0", "~");
        cur = match cur {
            Value::Object(m) => m.get(&tok)?,
            Value::Array(v) => v.get(tok.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn subst(v: &Value, vars: &BTreeMap<String, Value>) -> Result<Value, String> {
    Ok(match v {
        Value::String(x) if x.starts_with('$') => vars
            .get(&x[1..])
            .cloned()
            .ok_or_else(|| format!("unset variable {}", x))?,
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, e) in m {
                out.insert(k.clone(), subst(e, vars)?);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|e| subst(e, vars)).collect::<Result<_, _>>()?),
        other => other.clone(),
    })
}

fn is_id(s: &str) -> Option<&str> {
    let (prefix, rest) = s.split_once('_')?;
    if !ID_PREFIXES.contains(&prefix) || rest.is_empty() {
        return None;
    }
    if rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Some(prefix)
    } else {
        None
    }
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
fn is_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.end <= b.len() && b[r].iter().all(u8::is_ascii_digit);
    if b.len() < 20 || !digits(0..4) || b[4] != b'-' || !digits(5..7) || b[7] != b'-' || !digits(8..10) || b[10] != b'T'
    {
        return false;
    }
    if !digits(11..13) || b[13] != b':' || !digits(14..16) || b[16] != b':' || !digits(17..19) {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z'] => true,
        [sign, h1, h2, b':', m1, m2] => {
            (*sign == b'+' || *sign == b'-') && [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// A saved variable's value → "$name" (names sorted); else an opaque id → "<id:prefix>", a SHA-256
/// hex digest → "<sha256>", an RFC 3339 time → "<time>"; else the pages origin → "${PAGES}".
fn normalize(v: &Value, vars: &BTreeMap<String, Value>, pages: &str) -> Value {
    match v {
        Value::String(x) => {
            for (name, val) in vars {
                if val.as_str() == Some(x.as_str()) {
                    return json!(format!("${}", name));
                }
            }
            if let Some(p) = is_id(x) {
                return json!(format!("<id:{}>", p));
            }
            if is_sha256(x) {
                return json!("<sha256>");
            }
            if is_time(x) {
                return json!("<time>");
            }
            if pages.is_empty() {
                v.clone()
            } else {
                json!(x.replace(pages, PAGES))
            }
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, e)| (k.clone(), normalize(e, vars, pages))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(|e| normalize(e, vars, pages)).collect()),
        other => other.clone(),
    }
}

/// JSON equality with numbers compared by value (1 == 1.0), as the Go engine's float64s do.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).map_or(false, |w| same(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same(v, w)),
        _ => a == b,
    }
}

/// A step the local operator takes (conformance/README.md "Who takes a step"): `bap approvals
/// approve|deny` over the server's Unix socket; stdout is the answer, or the problem (exit 1).
fn operator_call(op: &str, a: &Map<String, Value>, key: Option<String>) -> Outcome {
    let fail = |e: String| Outcome {
        status: Value::Null,
        code: Value::Null,
        doc: Value::Null,
        err: Some(e),
        body: None,
    };
    let body = a.get("body").cloned().unwrap_or_else(|| json!({}));
    let decision = body["decision"].as_str().unwrap_or("");
    let id = a.get("approval_id").and_then(Value::as_str).unwrap_or("");
    if op != "resolve_approval" || (decision != "approve" && decision != "deny") || id.is_empty() {
        return fail(format!("the operator takes only resolve_approval steps with a decision, not {}", op));
    }
    let (bin, socket) = match (std::env::var("CONFORMANCE_BAP"), std::env::var("CONFORMANCE_SOCKET")) {
        (Ok(b), Ok(s)) => (b, s),
        _ => return fail("an operator step needs CONFORMANCE_BAP and CONFORMANCE_SOCKET".to_owned()),
    };
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["approvals", decision, id, "--socket", &socket]);
    if let Some(r) = body["reason"].as_str() {
        cmd.args(["--reason", r]);
    }
    if let Some(k) = key {
        cmd.args(["--idempotency-key", &k]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) => return fail(format!("bap approvals {}: {}", decision, e)),
    };
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if out.status.success() {
        return Outcome {
            status: json!("ok"),
            code: Value::Null,
            doc,
            err: None,
            body: None,
        };
    }
    match doc["status"].as_u64() {
        Some(st) => Outcome {
            status: json!(st),
            code: doc.get("code").cloned().unwrap_or(Value::Null),
            doc,
            err: None,
            body: None,
        },
        None => fail(format!("bap approvals {}: {}", decision, String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// The auditor's check of a bundle (conformance/README.md "verify_bundle"): `bap bundle verify FILE
/// --jwks BASE/bap/v1/audit/keys` on the bytes this runner's client got; stdout is the report.
fn verify_bundle(base_url: &str, body: &[u8]) -> Result<Value, String> {
    let bin = std::env::var("CONFORMANCE_BAP").map_err(|_| "verify_bundle needs CONFORMANCE_BAP".to_owned())?;
    let path = std::env::temp_dir().join(format!("conformance-bundle-{}-{}.tar", std::process::id(), bap::new_idempotency_key()));
    std::fs::write(&path, body).map_err(|e| e.to_string())?;
    let jwks = format!("{}/bap/v1/audit/keys", base_url.trim_end_matches('/'));
    let out = std::process::Command::new(bin)
        .arg("bundle")
        .arg("verify")
        .arg(&path)
        .args(["--jwks", &jwks])
        .output();
    let _ = std::fs::remove_file(&path);
    let out = out.map_err(|e| format!("bap bundle verify: {}", e))?;
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if report.get("valid").is_none() {
        return Err(format!("bap bundle verify: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(report)
}

/// `until`: every pointer holds its value (substituted, normalized).
fn holds(doc: &Value, until: &Map<String, Value>, vars: &BTreeMap<String, Value>, pages: &str) -> bool {
    until.iter().all(|(ptr, want)| match subst(want, vars) {
        Ok(w) => same(
            &normalize(pointer(doc, ptr).unwrap_or(&Value::Null), vars, pages),
            &normalize(&w, vars, pages),
        ),
        Err(_) => false,
    })
}

const UNTIL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
const UNTIL_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

fn run_scenario(c: &Client, base_url: &str, sc: &Value, nonce: &str, pages: &str, errs: &mut Vec<String>) -> Value {
    let name = sc["name"].as_str().unwrap_or("").to_owned();
    let mut vars: BTreeMap<String, Value> = BTreeMap::new();
    let mut steps = Vec::new();
    let mut ok = true;
    let empty = Vec::new();
    for (i, st) in sc["steps"].as_array().unwrap_or(&empty).iter().enumerate() {
        let op = st["op"].as_str().unwrap_or("");
        let key = st
            .get("key")
            .and_then(Value::as_str)
            .map(|k| format!("conf-{}-{}-{}-{}", LANG, nonce, name, k));
        let args = st.get("args").cloned().unwrap_or_else(|| json!({}));
        let mut o = match subst(&args, &vars) {
            Err(e) => Outcome {
                status: Value::Null,
                code: Value::Null,
                doc: Value::Null,
                err: Some(e),
                body: None,
            },
            Ok(Value::Object(a)) if st["as"] == "operator" => operator_call(op, &a, key),
            Ok(Value::Object(a)) => match st.get("until").and_then(Value::as_object) {
                Some(until) => {
                    let deadline = std::time::Instant::now() + UNTIL_TIMEOUT;
                    let mut o = run_call(c, op, &a, key.clone());
                    while o.err.is_none() && !holds(&o.doc, until, &vars, pages) && std::time::Instant::now() < deadline {
                        std::thread::sleep(UNTIL_PAUSE);
                        o = run_call(c, op, &a, key.clone());
                    }
                    o
                }
                None => run_call(c, op, &a, key),
            },
            Ok(_) => run_call(c, op, &Map::new(), key),
        };
        if st["verify_bundle"] == json!(true) && o.err.is_none() && o.status == json!("ok") {
            match verify_bundle(base_url, o.body.as_deref().unwrap_or(&[])) {
                Ok(report) => {
                    if let Value::Object(m) = &mut o.doc {
                        m.insert("verified".to_owned(), report);
                    }
                }
                Err(e) => o.err = Some(e),
            }
        }
        if let Some(e) = &o.err {
            o.status = json!("error");
            o.code = Value::Null;
            o.doc = json!({});
            errs.push(format!("{} step {}: {}", name, i + 1, e));
        }
        if o.doc.is_null() {
            o.doc = json!({});
        }
        let exp = &st["expect"];
        let empty_fields = Map::new();
        let want_fields = exp.get("fields").and_then(Value::as_object).unwrap_or(&empty_fields);
        let mut fields = Map::new();
        for ptr in want_fields.keys() {
            fields.insert(ptr.clone(), pointer(&o.doc, ptr).cloned().unwrap_or(Value::Null));
        }
        let got = normalize(&Value::Object(fields), &vars, pages);
        let want_code = exp.get("code").cloned().unwrap_or(Value::Null);
        let mut passed = same(&o.status, exp.get("status").unwrap_or(&Value::Null)) && same(&o.code, &want_code);
        for (ptr, want) in want_fields {
            match subst(want, &vars) {
                Ok(w) if same(&got[ptr.as_str()], &normalize(&w, &vars, pages)) => {}
                _ => passed = false,
            }
        }
        if !passed {
            errs.push(format!(
                "{} step {} ({}): got status={} code={} fields={}; want {}",
                name,
                i + 1,
                op,
                o.status,
                o.code,
                got,
                exp
            ));
        }
        // Saved after the checks: a step compares with what earlier steps saved.
        if let Some(save) = st.get("save").and_then(Value::as_object) {
            for (var, ptr) in save {
                if let Some(v) = ptr.as_str().and_then(|p| pointer(&o.doc, p)) {
                    if !v.is_null() {
                        vars.insert(var.clone(), v.clone());
                    }
                }
            }
        }
        ok = ok && passed;
        let errored = o.status == json!("error");
        steps.push(json!({"op": op, "status": o.status, "code": o.code, "fields": got, "pass": passed}));
        if errored {
            break;
        }
    }
    json!({"name": name, "pass": ok, "steps": steps})
}

fn usage() -> ! {
    eprintln!("usage: runner_rs --base-url URL --out DIR [--scenarios DIR] [--pages ORIGIN]");
    exit(2)
}

fn main() {
    let mut base_url = String::new();
    let mut out = String::new();
    let mut dir = String::from("conformance/scenarios");
    let mut pages = std::env::var("CONFORMANCE_PAGES").unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).unwrap_or_else(|| usage());
        match flag.trim_start_matches('-') {
            "base-url" => base_url = value(),
            "out" => out = value(),
            "scenarios" => dir = value(),
            "pages" => pages = value(),
            _ => usage(),
        }
    }
    if base_url.is_empty() || out.is_empty() {
        usage();
    }
    let pages = pages.trim_end_matches('/').to_owned();
    let nonce = std::env::var("CONFORMANCE_RUN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| bap::new_idempotency_key()[24..].to_owned());

    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().map_or(false, |x| x == "json"))
            .collect(),
        Err(e) => {
            eprintln!("conformance[{}]: {}: {}", LANG, dir, e);
            exit(1)
        }
    };
    files.sort();
    let client = Client::new(base_url.trim_end_matches('/'));
    let mut errs = Vec::new();
    let mut results = Vec::new();
    let mut passed = 0;
    for f in &files {
        let mut text = std::fs::read_to_string(f).unwrap_or_else(|e| {
            eprintln!("{}: {}", f.display(), e);
            exit(1)
        });
        if text.contains(PAGES) {
            if pages.is_empty() {
                eprintln!(
                    "conformance[{}]: {} uses {}: pass --pages or set CONFORMANCE_PAGES",
                    LANG,
                    f.display(),
                    PAGES
                );
                exit(2);
            }
            text = text.replace(PAGES, &pages);
        }
        let sc: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            eprintln!("{}: {}", f.display(), e);
            exit(1)
        });
        let r = run_scenario(&client, &base_url, &sc, &nonce, &pages, &mut errs);
        if r["pass"] == json!(true) {
            passed += 1;
        }
        results.push(r);
    }
    let mut buf = serde_json::to_string_pretty(&json!({ "scenarios": results })).expect("results encode");
    buf.push('\n');
    if let Err(e) =
        std::fs::create_dir_all(&out).and_then(|_| std::fs::write(Path::new(&out).join(format!("{}.json", LANG)), buf))
    {
        eprintln!("conformance[{}]: {}", LANG, e);
        exit(1);
    }
    for e in &errs {
        eprintln!("conformance[{}]: FAIL {}", LANG, e);
    }
    eprintln!("conformance[{}]: {}/{} scenarios pass", LANG, passed, results.len());
    if !errs.is_empty() {
        exit(1);
    }
}
