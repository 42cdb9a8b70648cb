//! Event subscriptions over Server-Sent Events that resume from their cursor.

use crate::client::{headers_of, read_answer, Client};
use crate::problem::{Error, Problem};
use crate::transport::{backoff, path_escape, retry_after};
use crate::types::Event;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, SystemTime};

enum Cursor {
    /// A task stream: the last seq yielded.
    Seq(i64),
    /// The all-tasks stream: the last opaque cursor (`""`: from now).
    Opaque(String),
}

/// An iterator over the events of a stream, from [`Client::subscribe`] or
/// [`Client::subscribe_all`]. It resumes by itself: when the connection drops, stays silent
/// longer than the client's stream read timeout, or the server restarts, it reconnects with the
/// cursor of the last event it yielded (`Last-Event-ID`), so each event comes exactly once and,
/// per task, in `seq` order. It ends after yielding a problem a reconnect cannot fix (400, 401,
/// 403, 404); it never ends otherwise, so stop it by dropping it (e.g. leave the loop).
pub struct Subscription {
    client: Client,
    op: &'static str,
    path: String,
    cursor: Cursor,
    reader: Option<BufReader<Box<dyn Read + Send + Sync + 'static>>>,
    failures: u32,
    /// The wait before the next connection attempt.
    wait: Option<Duration>,
    done: bool,
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("path", &self.path)
            .field("cursor", &self.cursor())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Follows one task's events with `seq > after` (0: from the first) over Server-Sent
    /// Events; see [`Subscription`]. Scope `bap:events.read`.
    ///
    /// ```no_run
    /// # let client = bap::Client::new("http://127.0.0.1:7777");
    /// for event in client.subscribe("tsk_7Hq2ZkP9xW3m", 0) {
    ///     let event = event?;
    ///     println!("{} {}", event.seq, event.r#type);
    /// }
    /// # Ok::<(), bap::Error>(())
    /// ```
    pub fn subscribe(&self, task_id: &str, after: i64) -> Subscription {
        Subscription::new(
            self,
            "stream_task_events",
            format!("/bap/v1/tasks/{}/events/stream", path_escape(task_id)),
            Cursor::Seq(after),
        )
    }

    /// Follows every event of every task the caller may see, after `cursor` (the `cursor` of an
    /// earlier event; `""`: from now), resuming like [`Client::subscribe`]. Events of one task
    /// come in `seq` order.
    pub fn subscribe_all(&self, cursor: &str) -> Subscription {
        Subscription::new(
            self,
            "stream_events",
            "/bap/v1/events/stream".to_owned(),
            Cursor::Opaque(cursor.to_owned()),
        )
    }
}

impl Subscription {
    fn new(client: &Client, op: &'static str, path: String, cursor: Cursor) -> Subscription {
        Subscription {
            client: client.clone(),
            op,
            path,
            cursor,
            reader: None,
            failures: 0,
            wait: None,
            done: false,
        }
    }

    /// The cursor the next reconnection resumes from: the last seq (task streams) or the last
    /// opaque cursor (all-tasks stream).
    pub fn cursor(&self) -> String {
        match &self.cursor {
            Cursor::Seq(s) => s.to_string(),
            Cursor::Opaque(c) => c.clone(),
        }
    }

    /// Opens one connection; Ok(None) means "wait and retry".
    fn connect(&mut self) -> Result<(), Error> {
        let mut req = self
            .client
            .agent
            .get(&self.client.url(&self.path, &[]))
            .set("Accept", "text/event-stream");
        let last = self.cursor();
        if !last.is_empty() {
            req = req.set("Last-Event-ID", &last);
        }
        if let Some(tok) = self.client.bearer(self.op)? {
            req = req.set("Authorization", &format!("Bearer {}", tok));
        }
        let problem = match req.call() {
            Ok(resp) if resp.status() == 200 => {
                self.reader = Some(BufReader::with_capacity(64 << 10, resp.into_reader()));
                return Ok(());
            }
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => {
                let status = resp.status();
                let headers = headers_of(&resp);
                match read_answer(resp) {
                    Ok(a) => Problem::from_answer(a.status, a.headers, a.body),
                    Err(_) => Problem::from_answer(status, headers, Vec::new()),
                }
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(Error::Transport {
                    op: self.op.to_owned(),
                    message: t.to_string(),
                });
            }
        };
        if problem.status == 401 {
            if let Some(t) = &self.client.token {
                if t.invalidate() && self.failures == 0 {
                    return Err(Error::Transport {
                        op: self.op.to_owned(),
                        message: "token refused; fetching another".into(),
                    });
                }
            }
        }
        if problem.status != 429 && problem.status < 500 {
            self.done = true;
        } else if let Some(d) = problem
            .header("retry-after")
            .and_then(|h| retry_after(h, SystemTime::now()))
        {
            self.wait = Some(d);
        }
        Err(problem.into())
    }

    /// Reads the next message of the open stream: Ok(Some(event)) to yield, Ok(None) when the
    /// stream ended, Err on a read or decoding failure.
    fn read_event(&mut self) -> Result<Option<Event>, String> {
        let reader = match self.reader.as_mut() {
            Some(r) => r,
            None => return Ok(None),
        };
        let mut id: Option<String> = None;
        let mut data: Option<String> = None;
        let mut line = String::new();
        loop {
            line.clear();
            let n = reader.read_line(&mut line).map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(None);
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                // Dispatch.
                let ev = match data.take() {
                    Some(d) => {
                        Some(serde_json::from_str::<Event>(&d).map_err(|e| format!("decoding an event: {}", e))?)
                    }
                    None => None,
                };
                let msg_id = id.take();
                if let Some(ev) = accept(&mut self.cursor, msg_id, ev) {
                    return Ok(Some(ev));
                }
                continue;
            }
            if l.starts_with(':') {
                continue; // a comment: keep-alive, or the server's closing reason
            }
            let (field, value) = match l.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (l, ""),
            };
            match field {
                "id" => id = Some(value.to_owned()),
                "data" => {
                    data = Some(match data.take() {
                        Some(d) => d + "\n" + value,
                        None => value.to_owned(),
                    })
                }
                _ => {}
            }
        }
    }
}

/// Whether to yield a message, advancing the cursor.
fn accept(cursor: &mut Cursor, id: Option<String>, ev: Option<Event>) -> Option<Event> {
    match cursor {
        Cursor::Seq(last) => {
            let ev = ev?;
            if ev.seq <= *last {
                return None; // already yielded (a replay overlap): drop it
            }
            *last = ev.seq;
            Some(ev)
        }
        Cursor::Opaque(last) => {
            *last = id?;
            ev
        }
    }
}

impl Iterator for Subscription {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if self.reader.is_none() {
                if let Some(w) = self.wait.take() {
                    std::thread::sleep(w.min(self.client.max_wait));
                }
                match self.connect() {
                    Ok(()) => {}
                    Err(e) => {
                        self.failures += 1;
                        if self.done {
                            return Some(Err(e));
                        }
                        if self.wait.is_none() {
                            self.wait = Some(backoff(self.client.backoff_base, self.failures));
                        }
                        continue;
                    }
                }
            }
            match self.read_event() {
                Ok(Some(ev)) => {
                    self.failures = 0;
                    return Some(Ok(ev));
                }
                Ok(None) | Err(_) => {
                    // The stream ended or broke: reconnect from the cursor.
                    self.reader = None;
                    self.failures += 1;
                    self.wait = Some(backoff(self.client.backoff_base, self.failures));
                }
            }
        }
    }
}
