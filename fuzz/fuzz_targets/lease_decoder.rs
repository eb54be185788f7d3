//! Bytes a client could send the daemon's lease socket, any at all: the framer and the
//! decoder never panic, and what decodes encodes back to a message that decodes (scores may
//! differ in the last bit: serde_json's float parsing is not exact).
#![no_main]

use hotpin_lease::wire::{Framer, decode_reply, decode_request, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = decode_reply(bytes);
    let mut framer = Framer::default();
    for piece in bytes.chunks(97) {
        framer.push(piece);
        while let Some(line) = framer.next_line() {
            let Ok(line) = line else { continue };
            if let Ok(request) = decode_request(&line) {
                let again = encode(&request);
                decode_request(&again[..again.len() - 1]).expect("its own encoding decodes");
            }
        }
    }
});
