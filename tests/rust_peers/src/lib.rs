//! What the agent's and the client's handlers see, and the extension messages both binaries use.
//!
//! With `ACP_RUST_PEER_LOG=PATH` set, each handler appends one JSON line to PATH:
//! `{"peer": "agent" | "client", "method": ..., "meta": <the _meta the SDK handed the handler, or null>}`.
//! The tests read it to learn what the SDK gives a handler of a message's `params._meta`.

use agent_client_protocol::{JsonRpcRequest, JsonRpcResponse};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::io::Write;

/// The `_meta` object of a typed message (`agent_client_protocol::v1::schema::Meta`).
pub type Meta = Map<String, Value>;

/// Append what a handler of `method` was handed as `_meta` to the log named by `ACP_RUST_PEER_LOG`.
pub fn log_seen(peer: &str, method: &str, meta: Option<&Meta>) {
    let Ok(path) = std::env::var("ACP_RUST_PEER_LOG") else {
        return;
    };
    let line = json!({"peer": peer, "method": method, "meta": meta});
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| writeln!(file, "{line}"));
    if let Err(error) = written {
        eprintln!("rust peer: cannot write {path}: {error}");
    }
}

/// `_test.dev/echo`: the agent's extension request to the client, which answers `{"echo": value}`
/// (as the Python SDK test client, `tests/support/acp_app.py`, does).
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_test.dev/echo", response = EchoResponse)]
#[serde(rename_all = "camelCase")]
pub struct EchoRequest {
    pub session_id: String,
    pub value: i64,
}

/// The answer to `_test.dev/echo`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
pub struct EchoResponse {
    pub echo: i64,
}

/// `_example.com/workspace/buffers`: the example agent's (`examples/agent.py`) extension request, sent to a
/// client that declares `clientCapabilities._meta["example.com/workspace"].buffers`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcRequest)]
#[request(method = "_example.com/workspace/buffers", response = BuffersResponse)]
#[serde(rename_all = "camelCase")]
pub struct BuffersRequest {
    pub session_id: String,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Meta>,
}

/// The client's open buffers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonRpcResponse)]
pub struct BuffersResponse {
    pub buffers: Vec<Value>,
}
