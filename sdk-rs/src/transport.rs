//! Small self-contained helpers of the transport: percent-encoding, UUID v7 keys, base64,
//! SHA-256, Retry-After and backoff. No extra crates, so the SDK builds from Debian's packages.

use std::fs::File;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Escapes a path segment: everything but RFC 3986 unreserved characters is percent-encoded.
pub(crate) fn path_escape(s: &str) -> String {
    escape(s, false)
}

/// Escapes a query or form value (application/x-www-form-urlencoded: a space becomes `+`).
pub(crate) fn form_escape(s: &str) -> String {
    escape(s, true)
}

fn escape(s: &str, plus: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => out.push(b as char),
            b' ' if plus => out.push('+'),
            _ => out.push_str(&format!("%{:02X}", b)),
        }
    }
    out
}

/// Fills buf with random bytes from `/dev/urandom`; where that is missing, with a mix of the
/// clock, the process id and a counter (unique, though not unpredictable).
pub(crate) fn random_bytes(buf: &mut [u8]) {
    if let Ok(mut f) = File::open("/dev/urandom") {
        if f.read_exact(buf).is_ok() {
            return;
        }
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut state = nanos ^ (u64::from(std::process::id()) << 32) ^ COUNTER.fetch_add(0x9E37_79B9, Ordering::Relaxed);
    for chunk in buf.chunks_mut(8) {
        // SplitMix64.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_be_bytes()[..chunk.len()]);
    }
}

/// A new RFC 9562 UUID version 7: 48 bits of Unix milliseconds, the version, 12 random bits,
/// the variant and 62 random bits. This is the `Idempotency-Key` of a mutating call made
/// without one; keys sort by creation time.
pub fn new_idempotency_key() -> String {
    let mut u = [0u8; 16];
    random_bytes(&mut u[6..]);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    u[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    u[6] = (u[6] & 0x0f) | 0x70;
    u[8] = (u[8] & 0x3f) | 0x80;
    let h = hex(&u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

pub(crate) fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push_str(&format!("{:02x}", x));
    }
    s
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity((data.len() + 2) / 3 * 4);
    for chunk in data.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 (padding optional); None for anything else.
pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// SHA-256 (FIPS 180-4) of data.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 64];
        for i in 0..16 {
            w[i] = u32::from_be_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// The sha-256 member of an RFC 9530 `Repr-Digest` header.
pub(crate) fn repr_sha256(header: &str) -> Option<Vec<u8>> {
    for member in header.split(',') {
        let (k, v) = match member.trim().split_once('=') {
            Some(kv) => kv,
            None => continue,
        };
        if !k.trim().eq_ignore_ascii_case("sha-256") {
            continue;
        }
        let v = v.trim().trim_start_matches(':').trim_end_matches(':');
        if let Some(d) = base64_decode(v) {
            if d.len() == 32 {
                return Some(d);
            }
        }
    }
    None
}

/// Parses a `Retry-After` header: delay-seconds or an HTTP date (IMF-fixdate).
pub(crate) fn retry_after(h: &str, now: SystemTime) -> Option<Duration> {
    let h = h.trim();
    if h.is_empty() {
        return None;
    }
    if h.bytes().all(|b| b.is_ascii_digit()) {
        return h.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = parse_http_date(h)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses `Sun, 06 Nov 1994 08:49:37 GMT`.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let rest = s.split_once(", ")?.1;
    let f: Vec<&str> = rest.split(' ').collect();
    if f.len() != 5 || f[4] != "GMT" {
        return None;
    }
    let day: i64 = f[0].parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == f[1])? as i64
        + 1;
    let year: i64 = f[2].parse().ok()?;
    let t: Vec<i64> = f[3].split(':').filter_map(|x| x.parse().ok()).collect();
    if t.len() != 3 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2];
    if secs < 0 {
        return Some(UNIX_EPOCH);
    }
    Some(UNIX_EPOCH + Duration::from_secs(secs as u64))
}

/// The wait before retry n (1-based) without Retry-After: base, 2·base, 4·base, … capped at
/// 5 s, plus up to 25 % jitter.
pub(crate) fn backoff(base: Duration, n: u32) -> Duration {
    let d = base
        .saturating_mul(1 << n.saturating_sub(1).min(5))
        .min(Duration::from_secs(5));
    let mut r = [0u8; 8];
    random_bytes(&mut r);
    let quarter = d.as_nanos() as u64 / 4;
    let jitter = if quarter == 0 {
        0
    } else {
        u64::from_be_bytes(r) % (quarter + 1)
    };
    d + Duration::from_nanos(jitter)
}

/// Reports whether `body` is a JSON object with at least one key, every key among `keys`: how an
/// answer that shares its status with another (the `InterruptedCommandResponse` of a replayed
/// key beside an operation's result) is told apart. Anything else — another shape, not JSON — is
/// left to the primary answer, whose decoding then says what is wrong.
pub(crate) fn only_keys(body: &[u8], keys: &[&str]) -> bool {
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(m) => !m.is_empty() && m.keys().all(|k| keys.contains(&k.as_str())),
        Err(_) => false,
    }
}
