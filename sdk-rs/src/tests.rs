//! Unit tests against a scripted HTTP server on 127.0.0.1 (std only, no network beyond loopback).

use crate::transport::{base64_decode, base64_encode, hex, retry_after, sha256};
use crate::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A request the fake server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One scripted answer: status, extra headers, body.
type Reply = (u16, Vec<(&'static str, String)>, String);

/// Serves `replies` in order, one per connection, and records the requests. The handler sees
/// the request and the index of the answer.
fn serve(handler: impl Fn(usize, &Seen) -> Reply + Send + 'static, count: usize) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    thread::spawn(move || {
        for i in 0..count {
            let (stream, _) = match listener.accept() {
                Ok(s) => s,
                Err(_) => return,
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut parts = line.split_whitespace();
            let method = parts.next().unwrap_or("").to_owned();
            let target = parts.next().unwrap_or("").to_owned();
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    headers.push((k.trim().to_owned(), v.trim().to_owned()));
                }
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map_or(0, |(_, v)| v.parse().unwrap());
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            let req = Seen {
                method,
                target,
                headers,
                body: String::from_utf8(body).unwrap(),
            };
            let (status, extra, body) = handler(i, &req);
            log.lock().unwrap().push(req);
            let mut out = stream;
            let mut head = format!(
                "HTTP/1.1 {} X\r\nConnection: close\r\nContent-Length: {}\r\n",
                status,
                body.len()
            );
            if !extra.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                head.push_str("Content-Type: application/json\r\n");
            }
            for (k, v) in extra {
                head.push_str(&format!("{}: {}\r\n", k, v));
            }
            head.push_str("\r\n");
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(body.as_bytes());
        }
    });
    (base, seen)
}

fn fast(base: &str) -> Client {
    let mut c = Client::new(base);
    c.backoff_base = Duration::from_millis(1);
    c
}

const TASK: &str = r#"{"task_id":"tsk_1","state":"admitted","goal":"g","created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z","policy":{"allowed_origins":["https://a.example"]},"some_future_field":{"x":1}}"#;
const RECEIPT: &str = r#"{"receipt_id":"rcp_1","command_id":"cmd_1","task_id":"tsk_1","operation":"create_task","outcome":"applied","issued_at":"2026-01-01T00:00:00Z"}"#;

fn created() -> String {
    format!(r#"{{"task":{},"receipt":{}}}"#, TASK, RECEIPT)
}

fn task_request() -> CreateTaskRequest {
    CreateTaskRequest {
        goal: "g".into(),
        policy: Policy {
            allowed_origins: vec!["https://a.example".into()],
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn retries_reuse_the_generated_idempotency_key() {
    let (base, seen) = serve(
        |i, _| match i {
            0 => (
                503,
                vec![("Retry-After", "0".into())],
                r#"{"status":503,"code":"unavailable","title":"x","detail":"busy","type":"t"}"#.into(),
            ),
            _ => (201, vec![], created()),
        },
        2,
    );
    let answer = fast(&base).create_task(&task_request()).unwrap();
    assert_eq!(answer.status(), 201);
    let created = answer.primary().unwrap();
    assert_eq!(created.task.task_id, "tsk_1");
    assert_eq!(created.task.state, TaskState::Admitted);
    assert_eq!(created.receipt.outcome, ReceiptOutcome::Applied);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let k0 = seen[0].header("Idempotency-Key").unwrap();
    assert_eq!(Some(k0), seen[1].header("Idempotency-Key"));
    assert_eq!(k0.len(), 36);
    assert_eq!(&k0[14..15], "7");
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].target, "/bap/v1/tasks");
    assert_eq!(seen[0].header("Content-Type"), Some("application/json"));
    let sent: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"goal": "g", "policy": {"allowed_origins": ["https://a.example"]}})
    );
}

#[test]
fn an_explicit_key_is_sent_and_problems_are_decoded() {
    let problem = r#"{"type":"urn:bap:problem:invalid_transition","title":"Invalid transition","status":409,"detail":"Task is cancelled.","code":"invalid_transition","receipt":{"receipt_id":"rcp_2","command_id":"cmd_2","task_id":"tsk_1","operation":"cancel_task","outcome":"rejected","issued_at":"2026-01-01T00:00:00Z","problem_code":"invalid_transition"}}"#;
    let (base, seen) = serve(
        move |_, _| {
            (
                409,
                vec![("Content-Type", "application/problem+json".into())],
                problem.into(),
            )
        },
        1,
    );
    let err = fast(&base)
        .cancel_task_with(
            "tsk_1",
            &CancelTaskRequest::default(),
            &CallOptions::new().idempotency_key("k-1"),
        )
        .unwrap_err();
    assert!(err.is_problem(&ProblemCode::InvalidTransition));
    let p = err.problem().unwrap();
    assert_eq!(p.status, 409);
    assert_eq!(p.detail, "Task is cancelled.");
    assert_eq!(p.receipt.as_ref().unwrap().outcome, ReceiptOutcome::Rejected);
    assert_eq!(err.to_string(), "bap: 409 invalid_transition: Task is cancelled.");
    assert_eq!(p.document().unwrap()["code"], "invalid_transition");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "409 invalid_transition is not retried");
    assert_eq!(seen[0].header("Idempotency-Key"), Some("k-1"));
    assert_eq!(seen[0].body, "{}");
}

#[test]
fn read_only_calls_send_no_key_and_only_given_query_parameters() {
    let (base, seen) = serve(|_, _| (200, vec![], r#"{"events":[],"next_after":null}"#.into()), 2);
    let c = fast(&base);
    let page = c.list_task_events("tsk 1", Some(3), None).unwrap();
    assert!(page.events.is_empty());
    assert_eq!(page.next_after, None);
    c.list_task_events("tsk_1", None, Some(10)).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/bap/v1/tasks/tsk%201/events?after=3");
    assert_eq!(seen[1].target, "/bap/v1/tasks/tsk_1/events?limit=10");
    assert!(seen[0].header("Idempotency-Key").is_none());
    assert_eq!(seen[0].header("Accept"), Some("application/json"));
}

#[test]
fn a_non_problem_error_answer_keeps_its_status() {
    let (base, _) = serve(
        |_, _| (404, vec![("Content-Type", "text/plain".into())], "nope".into()),
        1,
    );
    let err = fast(&base).get_task("tsk_1").unwrap_err();
    let p = err.problem().unwrap();
    assert_eq!((p.status, p.code.clone(), p.title.as_str()), (404, None, "Not Found"));
    assert_eq!(p.body, b"nope");
}

#[test]
fn alternative_answers_decode_by_status() {
    let approval = r#"{"approval_id":"apr_1","task_id":"tsk_1","state":"pending","reason":"r","requested_at":"2026-01-01T00:00:00Z","expires_at":"2026-01-01T00:15:00Z","held_request":{"method":"POST","url":"https://shop.example.com/order"}}"#;
    let body = format!(
        r#"{{"approval":{},"receipt":{}}}"#,
        approval,
        RECEIPT
            .replace("create_task", "act")
            .replace("applied", "pending_approval")
    );
    let (base, _) = serve(move |_, _| (202, vec![], body.clone()), 1);
    let req = ActRequest {
        node_id: Some("nd_1".into()),
        ..ActRequest::new(ActAction::Click)
    };
    match fast(&base).act("bs_1", &req).unwrap() {
        ActAnswer::ActPendingApproval(r) => {
            assert_eq!(r.approval.state, ApprovalState::Pending);
            assert_eq!(r.approval.held_request.as_ref().map(|h| h.method.as_str()), Some("POST"));
            assert_eq!(r.receipt.outcome, ReceiptOutcome::PendingApproval);
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn an_interrupted_replay_decodes_by_its_shape() {
    let receipt = |outcome: &str| RECEIPT.replace("create_task", "act").replace("applied", outcome);
    let interrupted = format!(r#"{{"receipt":{}}}"#, receipt("reconciliation_required"));
    let acted = format!(r#"{{"receipt":{},"epoch_id":"ep_1","navigated":false}}"#, receipt("applied"));
    let cancelled_replay = format!(r#"{{"receipt":{}}}"#, receipt("unknown_outcome"));
    let cancelled = format!(r#"{{"task":{},"receipt":{}}}"#, TASK, receipt("applied"));
    let bodies = vec![interrupted, acted, cancelled_replay, cancelled];
    let (base, _) = serve(move |i, _| (200, vec![], bodies[i].clone()), 4);
    let c = fast(&base);
    let req = ActRequest {
        node_id: Some("nd_1".into()),
        ..ActRequest::new(ActAction::Click)
    };
    match c.act("bs_1", &req).unwrap() {
        ActAnswer::InterruptedCommand(r) => {
            assert_eq!(r.receipt.outcome, ReceiptOutcome::ReconciliationRequired)
        }
        other => panic!("{:?}", other),
    }
    match c.act("bs_1", &req).unwrap() {
        ActAnswer::Act(r) => assert_eq!(r.epoch_id, "ep_1"),
        other => panic!("{:?}", other),
    }
    let replay = c.cancel_task("tsk_1", &CancelTaskRequest::default()).unwrap();
    assert_eq!(replay.status(), 200);
    match replay {
        CancelTaskAnswer::InterruptedCommand(r) => {
            assert_eq!(r.receipt.outcome, ReceiptOutcome::UnknownOutcome)
        }
        other => panic!("{:?}", other),
    }
    let done = c.cancel_task("tsk_1", &CancelTaskRequest::default()).unwrap();
    assert_eq!(done.primary().map(|r| r.task.task_id), Some("tsk_1".to_owned()));
}

#[test]
fn only_keys_needs_an_object_of_those_keys() {
    use crate::transport::only_keys;
    assert!(only_keys(br#"{"receipt":{}}"#, &["receipt"]));
    assert!(!only_keys(br#"{"receipt":{},"task":{}}"#, &["receipt"]));
    assert!(!only_keys(b"{}", &["receipt"]));
    assert!(!only_keys(b"[]", &["receipt"]));
    assert!(!only_keys(b"not json", &["receipt"]));
}

#[test]
fn enums_keep_unknown_values_and_structs_ignore_unknown_fields() {
    let d: ApprovalDecision = serde_json::from_str(r#""maybe""#).unwrap();
    assert_eq!(d, ApprovalDecision::Unknown("maybe".into()));
    assert_eq!(serde_json::to_string(&d).unwrap(), r#""maybe""#);
    assert_eq!(
        serde_json::to_string(&ApprovalDecision::Approve).unwrap(),
        r#""approve""#
    );
    assert_eq!(ArtifactKind::from("other"), ArtifactKind::Other);
    let t: Task = serde_json::from_str(TASK).unwrap();
    assert_eq!(t.goal, "g");
    assert_eq!(t.verification, None);
    // Optional fields are left out, not sent as null.
    let v = serde_json::to_value(&t).unwrap();
    assert!(v.get("verification").is_none());
    // A oneOf of single-key objects.
    let p: Postcondition =
        serde_json::from_str(r#"{"all":[{"text_present":"Thanks"},{"url_matches":"/done$"}]}"#).unwrap();
    assert!(matches!(&p.all[0], Clause::TextPresent(c) if c.text_present == "Thanks"));
    assert!(matches!(&p.all[1], Clause::UrlMatches(_)));
    assert_eq!(
        serde_json::to_string(&p).unwrap(),
        r#"{"all":[{"text_present":"Thanks"},{"url_matches":"/done$"}]}"#
    );
}

#[test]
fn events_decode_their_data_by_type() {
    let ev: Event = serde_json::from_str(
        r#"{"event_id":"evt_1","task_id":"tsk_1","seq":2,"type":"task.state_changed","time":"2026-01-01T00:00:00Z","data":{"from":"admitted","to":"running"}}"#,
    )
    .unwrap();
    match ev.decode_data().unwrap() {
        EventData::TaskStateChanged(d) => assert_eq!(d.to, TaskState::Running),
        other => panic!("{:?}", other),
    }
    assert!(EVENT_TYPES.contains(&"task.state_changed"));
    let unknown: Event = serde_json::from_str(
        r#"{"event_id":"evt_1","task_id":"tsk_1","seq":3,"type":"future.thing","time":"t","data":{"a":1}}"#,
    )
    .unwrap();
    assert!(matches!(unknown.decode_data().unwrap(), EventData::Unknown(_)));
}

fn sse_event(seq: i64) -> String {
    format!(
        "id: {seq}\nevent: task.created\ndata: {{\"event_id\":\"evt_{seq}\",\"task_id\":\"tsk_1\",\"seq\":{seq},\"type\":\"task.created\",\"time\":\"2026-01-01T00:00:00Z\",\"data\":{{}}}}\n\n",
        seq = seq
    )
}

#[test]
fn subscriptions_resume_from_the_last_event_id() {
    let (base, seen) = serve(
        |i, _| {
            let body = match i {
                0 => format!("retry: 1000\n: stream open\n\n{}{}", sse_event(1), sse_event(2)),
                1 => format!(": keep-alive\n\n{}{}", sse_event(2), sse_event(3)),
                _ => String::new(),
            };
            (200, vec![("Content-Type", "text/event-stream".into())], body)
        },
        3,
    );
    let seqs: Vec<i64> = fast(&base)
        .subscribe("tsk_1", 0)
        .take(3)
        .map(|e| e.unwrap().seq)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    let seen = seen.lock().unwrap();
    assert_eq!(seen[0].target, "/bap/v1/tasks/tsk_1/events/stream");
    assert_eq!(seen[0].header("Accept"), Some("text/event-stream"));
    assert_eq!(seen[0].header("Last-Event-ID"), Some("0"));
    assert_eq!(seen[1].header("Last-Event-ID"), Some("2"));
}

#[test]
fn subscriptions_end_on_a_problem_a_reconnect_cannot_fix() {
    let (base, _) = serve(
        |_, _| {
            (
                404,
                vec![("Content-Type", "application/problem+json".into())],
                r#"{"status":404,"code":"not_found","title":"Not found","detail":"No task.","type":"t"}"#.into(),
            )
        },
        1,
    );
    let mut sub = fast(&base).subscribe("tsk_x", 0);
    assert!(sub.next().unwrap().unwrap_err().is_problem(&ProblemCode::NotFound));
    assert!(sub.next().is_none());
}

#[test]
fn client_credentials_are_cached_and_refreshed_after_a_401() {
    let (base, seen) = serve(
        |i, req| match (i, req.target.as_str()) {
            (_, "/oauth2/token") => (
                200,
                vec![],
                format!(
                    r#"{{"access_token":"tok{}","token_type":"bearer","expires_in":900}}"#,
                    i
                ),
            ),
            (2, _) => (
                401,
                vec![("WWW-Authenticate", "Bearer".into())],
                r#"{"status":401,"code":"unauthorized","title":"t","detail":"d","type":"t"}"#.into(),
            ),
            _ => (200, vec![], format!(r#"{{"task":{}}}"#, TASK)),
        },
        5,
    );
    let mut c = Client::builder(&base)
        .client_credentials(ClientCredentials::new("cli_1", "s3cret").scope("bap:tasks.read"))
        .build();
    c.backoff_base = Duration::from_millis(1);
    c.get_task("tsk_1").unwrap(); // 0: token, 1: get_task
    c.get_task("tsk_1").unwrap(); // 2: 401, 3: token, 4: get_task
    let seen = seen.lock().unwrap();
    let targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        targets,
        vec![
            "/oauth2/token",
            "/bap/v1/tasks/tsk_1",
            "/bap/v1/tasks/tsk_1",
            "/oauth2/token",
            "/bap/v1/tasks/tsk_1"
        ]
    );
    assert_eq!(seen[0].method, "POST");
    assert_eq!(
        seen[0].header("Authorization"),
        Some(format!("Basic {}", base64_encode(b"cli_1:s3cret")).as_str())
    );
    let resource = crate::transport::form_escape(&base);
    assert_eq!(
        seen[0].body,
        format!(
            "grant_type=client_credentials&resource={}&scope=bap%3Atasks.read",
            resource
        )
    );
    assert_eq!(seen[1].header("Authorization"), Some("Bearer tok0"));
    assert_eq!(seen[2].header("Authorization"), Some("Bearer tok0"));
    assert_eq!(seen[4].header("Authorization"), Some("Bearer tok3"));
}

#[test]
fn a_static_token_is_sent() {
    let (base, seen) = serve(|_, _| (200, vec![], format!(r#"{{"task":{}}}"#, TASK)), 1);
    Client::builder(&base).token("abc").build().get_task("tsk_1").unwrap();
    assert_eq!(seen.lock().unwrap()[0].header("Authorization"), Some("Bearer abc"));
}

#[test]
fn artifacts_are_checked_against_repr_digest() {
    let good = format!("sha-256=:{}:", base64_encode(&sha256(b"hello")));
    let (base, _) = serve(
        move |i, _| {
            let digest = if i == 0 {
                good.clone()
            } else {
                "sha-256=:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:".into()
            };
            (
                200,
                vec![("Content-Type", "text/plain".into()), ("Repr-Digest", digest)],
                "hello".into(),
            )
        },
        2,
    );
    let c = fast(&base);
    let blob = c.get_artifact("art_1").unwrap();
    assert_eq!(blob.body, b"hello");
    assert_eq!(blob.media_type, "text/plain");
    assert_eq!(
        blob.sha256,
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    assert!(matches!(c.get_artifact("art_1"), Err(Error::DigestMismatch { .. })));
}

#[test]
fn network_errors_are_retried_then_reported() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener); // nothing listens there now
    let err = fast(&base).get_task("tsk_1").unwrap_err();
    assert!(matches!(err, Error::Transport { .. }), "{:?}", err);
}

#[test]
fn helpers() {
    assert_eq!(
        hex(&sha256(b"")),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        hex(&sha256(b"abc")),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let long = vec![b'a'; 1000];
    assert_eq!(
        hex(&sha256(&long)),
        "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"
    );
    for s in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
        assert_eq!(base64_decode(&base64_encode(s)).unwrap(), s);
    }
    assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
    assert_eq!(base64_encode(b"fo"), "Zm8=");
    let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
    assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
    assert_eq!(
        retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(retry_after("soon", SystemTime::now()), None);
    let k = new_idempotency_key();
    let b = k.as_bytes();
    assert_eq!((b[8], b[13], b[14], b[18], b[23]), (b'-', b'-', b'7', b'-', b'-'));
    assert!(matches!(b[19], b'8' | b'9' | b'a' | b'b'));
    assert_ne!(k, new_idempotency_key());
    assert_eq!(crate::transport::path_escape("a/b c~"), "a%2Fb%20c~");
}
