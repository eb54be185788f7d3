//! The messages between a `hotpin run` process (the client) and `tracer daemon` (the
//! arbiter): one JSON object per line, at most [`MAX_LINE`] bytes, over a Unix socket.
//!
//! A client says `hello` first (and `hold`, for leases it kept across a restart of the
//! daemon), then asks a lease for each block it decided to pin (`ask`,
//! with the block's score: copy seconds its pinning saves per second per byte), tells which
//! blocks it unregistered (`release`), and now and then the current scores of what it holds
//! (`scores`). The daemon answers each `hello` and `ask`, and may ask a client to give blocks
//! back (`reclaim`) at any time. Anything it cannot take is answered `refused`, with why.

use serde::{Deserialize, Serialize};

/// The longest line either side sends or accepts, newline excluded.
pub const MAX_LINE: usize = 4096;
/// The protocol this build speaks.
pub const VERSION: u32 = 1;
/// Blocks one `release` or `scores` may name (a line holds about this many).
pub const MAX_BLOCKS: usize = 64;

/// One block's lease: `[start, start + len)` of the client's memory, and its score.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    pub start: u64,
    pub len: u64,
    /// Copy seconds pinning saves per second per pinned byte (finite, not negative).
    pub score: f64,
}

/// What a client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Who it is (the pid is checked against the socket's peer).
    Hello { version: u32, pid: u32 },
    /// Leases it holds already (after the daemon restarted, the pins it kept), in as many
    /// messages as they need.
    Hold { holding: Vec<Lease> },
    /// A lease for a block it would pin; `id` is echoed in the answer.
    Ask { id: u64, lease: Lease },
    /// Blocks it unregistered: their leases end.
    Release { starts: Vec<u64> },
    /// The current scores of blocks it holds: `(start, score)`.
    Scores { scores: Vec<(u64, f64)> },
}

/// Why a lease was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Denial {
    /// The node's budget is spent on blocks at least as dense.
    NodeBudget,
    /// Blocks less dense are being given back for it: ask again shortly.
    Reclaiming,
    /// The cap of the client's user.
    UserCap,
    /// The cap of the client's cgroup.
    CgroupCap,
    /// Larger than the whole budget (or a cap).
    TooLarge,
    /// The client said something the tracer saw was not so.
    Distrusted,
    /// More messages than the daemon takes from one client.
    TooFrequent,
}

impl Denial {
    pub fn as_str(self) -> &'static str {
        match self {
            Denial::NodeBudget => "node-budget",
            Denial::Reclaiming => "reclaiming",
            Denial::UserCap => "user-cap",
            Denial::CgroupCap => "cgroup-cap",
            Denial::TooLarge => "too-large",
            Denial::Distrusted => "distrusted",
            Denial::TooFrequent => "too-frequent",
        }
    }
}

/// What the daemon sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Reply {
    /// The `hello` was taken: the node's budget.
    Welcome {
        budget: u64,
    },
    Granted {
        id: u64,
    },
    Denied {
        id: u64,
        reason: Denial,
    },
    /// Give these blocks back (unregister them, then `release`).
    Reclaim {
        starts: Vec<u64>,
    },
    /// A message not taken, and why; the connection stays unless `closing`.
    Refused {
        reason: String,
        closing: bool,
    },
}

/// Why a line is not a message.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("a line longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("not a message: {0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(&'static str),
}

/// Reads one line (newline excluded) as a client's message, checking every value.
pub fn decode_request(line: &[u8]) -> Result<Request, WireError> {
    if line.len() > MAX_LINE {
        return Err(WireError::TooLong);
    }
    let request: Request =
        serde_json::from_slice(line).map_err(|e| WireError::Malformed(e.to_string()))?;
    match &request {
        Request::Hello { version, .. } => {
            if *version != VERSION {
                return Err(WireError::Invalid(
                    "a protocol version this daemon does not speak",
                ));
            }
        }
        Request::Hold { holding } => {
            if holding.len() > MAX_BLOCKS {
                return Err(WireError::Invalid("too many blocks in one message"));
            }
            holding.iter().try_for_each(check_lease)?;
        }
        Request::Ask { lease, .. } => check_lease(lease)?,
        Request::Release { starts } => {
            if starts.len() > MAX_BLOCKS {
                return Err(WireError::Invalid("too many blocks in one message"));
            }
        }
        Request::Scores { scores } => {
            if scores.len() > MAX_BLOCKS {
                return Err(WireError::Invalid("too many blocks in one message"));
            }
            if scores.iter().any(|&(_, score)| !valid_score(score)) {
                return Err(WireError::Invalid(
                    "a score that is not a finite number >= 0",
                ));
            }
        }
    }
    Ok(request)
}

/// Reads one line as the daemon's message.
pub fn decode_reply(line: &[u8]) -> Result<Reply, WireError> {
    if line.len() > MAX_LINE {
        return Err(WireError::TooLong);
    }
    serde_json::from_slice(line).map_err(|e| WireError::Malformed(e.to_string()))
}

fn valid_score(score: f64) -> bool {
    score.is_finite() && score >= 0.0
}

fn check_lease(lease: &Lease) -> Result<(), WireError> {
    if lease.len == 0 || lease.start.checked_add(lease.len).is_none() {
        return Err(WireError::Invalid(
            "a block of no bytes, or past the address space",
        ));
    }
    if !valid_score(lease.score) {
        return Err(WireError::Invalid(
            "a score that is not a finite number >= 0",
        ));
    }
    Ok(())
}

/// One message as a line, newline included.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    // Serializing these types cannot fail (no maps with non-string keys, scores finite).
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Cuts a byte stream into lines, refusing any longer than [`MAX_LINE`]: what was read
/// goes in with [`Framer::push`], whole lines come out of [`Framer::next_line`].
#[derive(Debug, Default)]
pub struct Framer {
    buffer: Vec<u8>,
    /// Within a line too long: dropped up to its newline.
    skipping: bool,
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole line, or the error of one too long (its bytes dropped), or None until
    /// more is pushed.
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, WireError>> {
        loop {
            match self.buffer.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                    line.pop();
                    if std::mem::take(&mut self.skipping) {
                        continue;
                    }
                    if line.len() > MAX_LINE {
                        return Some(Err(WireError::TooLong));
                    }
                    return Some(Ok(line));
                }
                None if self.buffer.len() > MAX_LINE => {
                    self.buffer.clear();
                    if std::mem::replace(&mut self.skipping, true) {
                        return None;
                    }
                    return Some(Err(WireError::TooLong));
                }
                None => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        let requests = [
            Request::Hello {
                version: VERSION,
                pid: 7,
            },
            Request::Hold {
                holding: vec![Lease {
                    start: 4096,
                    len: 8192,
                    score: 0.5,
                }],
            },
            Request::Ask {
                id: 3,
                lease: Lease {
                    start: 1 << 40,
                    len: 1 << 20,
                    score: 1e-9,
                },
            },
            Request::Release {
                starts: vec![1, 2, 3],
            },
            Request::Scores {
                scores: vec![(1, 0.25)],
            },
        ];
        for request in requests {
            let line = encode(&request);
            assert_eq!(line.last(), Some(&b'\n'));
            let back = decode_request(&line[..line.len() - 1]).expect("decodes");
            assert_eq!(back, request);
        }
        let reply = Reply::Denied {
            id: 9,
            reason: Denial::CgroupCap,
        };
        let line = encode(&reply);
        assert_eq!(decode_reply(&line[..line.len() - 1]), Ok(reply));
    }

    #[test]
    fn bad_values_are_refused_with_why() {
        let cases: [&[u8]; 7] = [
            b"",
            b"{\"op\":\"ask\",\"id\":1}",
            b"{\"op\":\"ask\",\"id\":1,\"lease\":{\"start\":0,\"len\":0,\"score\":1}}",
            b"{\"op\":\"ask\",\"id\":1,\"lease\":{\"start\":18446744073709551615,\"len\":2,\"score\":1}}",
            b"{\"op\":\"ask\",\"id\":1,\"lease\":{\"start\":0,\"len\":2,\"score\":-1}}",
            b"{\"op\":\"hello\",\"version\":99,\"pid\":1}",
            b"{\"op\":\"release\",\"starts\":[],\"extra\":1}",
        ];
        for line in cases {
            assert!(
                decode_request(line).is_err(),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let many = format!(
            "{{\"op\":\"release\",\"starts\":[{}]}}",
            vec!["1"; MAX_BLOCKS + 1].join(",")
        );
        assert!(matches!(
            decode_request(many.as_bytes()),
            Err(WireError::Invalid(_))
        ));
    }

    #[test]
    fn lines_are_cut_and_one_too_long_is_dropped_whole() {
        let mut framer = Framer::default();
        framer.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(framer.next_line(), Some(Ok(b"{\"a\":1}".to_vec())));
        assert_eq!(framer.next_line(), None);
        framer.push(b":2}\n");
        assert_eq!(framer.next_line(), Some(Ok(b"{\"b\":2}".to_vec())));
        // A line over the limit, sent in pieces: one error, then the next line whole.
        framer.push(&vec![b'x'; MAX_LINE + 10]);
        assert_eq!(framer.next_line(), Some(Err(WireError::TooLong)));
        framer.push(&vec![b'x'; MAX_LINE + 10]);
        assert_eq!(framer.next_line(), None);
        framer.push(b"tail\nnext\n");
        assert_eq!(framer.next_line(), Some(Ok(b"next".to_vec())));
        assert_eq!(framer.next_line(), None);
    }

    /// The decoder and the framer never panic, whatever the bytes (the CI-sized form of
    /// `cargo xtask fuzz`'s `lease_decoder` target): random bytes, and valid messages with
    /// bytes flipped.
    #[test]
    fn random_and_mangled_input_never_panics() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let valid = encode(&Request::Ask {
            id: 1,
            lease: Lease {
                start: 4096,
                len: 4096,
                score: 1.0,
            },
        });
        for round in 0..20_000 {
            let bytes: Vec<u8> = if round % 2 == 0 {
                (0..next() % 200).map(|_| next() as u8).collect()
            } else {
                let mut bytes = valid.clone();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % bytes.len();
                    bytes[at] = next() as u8;
                }
                bytes
            };
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
            let mut framer = Framer::default();
            framer.push(&bytes);
            while let Some(line) = framer.next_line() {
                if let Ok(line) = line {
                    let _ = decode_request(&line);
                }
            }
        }
    }
}
