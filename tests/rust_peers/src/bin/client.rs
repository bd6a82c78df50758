//! A Rust ACP client on the `agent-client-protocol` crate (protocol v1): `client AGENT_COMMAND [ARGS...]`.
//!
//! It spawns the agent command with its stdin and stdout as the transport, drives one turn (`initialize`, `session/new` in its working directory,
//! `session/prompt`) and answers the agent's calls: `session/request_permission` (the first allow option),
//! `fs/read_text_file` (from the disk) and the example agent's `_example.com/workspace/buffers` extension
//! request, which it declares in `clientCapabilities._meta`. Then it closes the agent's stdin and waits for the
//! agent to exit (at most 30 s, then kills it), as an editor does, and prints one JSON line on stdout: the
//! agent's name, the stop reason, the session update kinds, the calls it answered and the agent's exit status.
//!
//! Not the SDK's `AcpAgent`: that sends the agent SIGTERM one second after closing its stdin and SIGKILL two
//! seconds later, too soon on a loaded machine for `acp-otel proxy` to export its last spans (docs/agents.md). Every handler logs the
//! `_meta` it was handed (`ACP_RUST_PEER_LOG`, see the library).

use acp_otel_rust_peers::{BuffersRequest, BuffersResponse, Meta, log_seen};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ClientCapabilities, ContentBlock, FileSystemCapabilities, Implementation, InitializeRequest,
    NewSessionRequest, PermissionOptionKind, PromptRequest, ReadTextFileRequest,
    ReadTextFileResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, TextContent,
};
use agent_client_protocol::{
    Agent, ByteStreams, Client, Error, on_receive_notification, on_receive_request,
};
use async_process::{Command, Stdio};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Seen {
    updates: Vec<Value>,
    calls: Vec<String>,
}

fn main() -> Result<(), Error> {
    let command: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, args)) = command.split_first() else {
        return Err(Error::invalid_params().data("usage: client AGENT_COMMAND [ARGS...]"));
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(Error::into_internal_error)?;
    let (Some(to_agent), Some(from_agent)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::internal_error().data("the agent's pipes"));
    };
    let agent = ByteStreams::new(to_agent, from_agent);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (on_update, on_permission, on_read, on_buffers, summary) =
        (seen.clone(), seen.clone(), seen.clone(), seen.clone(), seen);
    let cwd = std::env::current_dir().map_err(Error::into_internal_error)?;
    let mut declared = Meta::new();
    declared.insert("example.com/workspace".into(), json!({"buffers": true}));
    let line = futures::executor::block_on(
        Client
            .v1()
            .name("rust-test-client")
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    let update = serde_json::to_value(&notification.update).unwrap_or(Value::Null);
                    on_update
                        .lock()
                        .expect("seen")
                        .updates
                        .push(update["sessionUpdate"].clone());
                    Ok(())
                },
                on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest, responder, _cx| {
                    log_seen(
                        "client",
                        "session/request_permission",
                        request.meta.as_ref(),
                    );
                    on_permission
                        .lock()
                        .expect("seen")
                        .calls
                        .push("session/request_permission".into());
                    let allow = request
                        .options
                        .iter()
                        .find(|o| o.kind == PermissionOptionKind::AllowOnce);
                    let outcome = match allow {
                        Some(option) => RequestPermissionOutcome::Selected(
                            SelectedPermissionOutcome::new(option.option_id.clone()),
                        ),
                        None => RequestPermissionOutcome::Cancelled,
                    };
                    responder.respond(RequestPermissionResponse::new(outcome))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: ReadTextFileRequest, responder, _cx| {
                    log_seen("client", "fs/read_text_file", request.meta.as_ref());
                    on_read
                        .lock()
                        .expect("seen")
                        .calls
                        .push("fs/read_text_file".into());
                    match std::fs::read_to_string(&request.path) {
                        Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                        Err(error) => responder
                            .respond_with_error(Error::internal_error().data(error.to_string())),
                    }
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: BuffersRequest, responder, _cx| {
                    log_seen(
                        "client",
                        "_example.com/workspace/buffers",
                        request.meta.as_ref(),
                    );
                    on_buffers
                        .lock()
                        .expect("seen")
                        .calls
                        .push("_example.com/workspace/buffers".into());
                    let buffer =
                        json!({"path": "src/main.rs", "languageId": "rust", "dirty": false});
                    responder.respond(BuffersResponse {
                        buffers: vec![buffer],
                    })
                },
                on_receive_request!(),
            )
            .connect_with(agent, async move |cx: ConnectionTo<Agent>| {
                let capabilities = ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new().read_text_file(true))
                    .meta(declared);
                let init = cx
                    .send_request(
                        InitializeRequest::new(ProtocolVersion::V1)
                            .client_capabilities(capabilities)
                            .client_info(Implementation::new("rust-test-client", "1.0.0")),
                    )
                    .block_task()
                    .await?;
                let session = cx
                    .send_request(NewSessionRequest::new(cwd))
                    .block_task()
                    .await?;
                let prompt = vec![ContentBlock::Text(TextContent::new(
                    "Hello from the Rust client",
                ))];
                let answer = cx
                    .send_request(PromptRequest::new(session.session_id.clone(), prompt))
                    .block_task()
                    .await?;
                let seen = summary.lock().expect("seen");
                let line = json!({
                    "agent": init.agent_info.map(|info| info.name),
                    "sessionId": session.session_id.0.to_string(),
                    "stopReason": serde_json::to_value(answer.stop_reason).unwrap_or(Value::Null),
                    "updates": seen.updates,
                    "calls": seen.calls,
                });
                Ok(line)
            }),
    )?;
    // The transport is gone with the connection: the agent has seen the end of its input.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_status().map_err(Error::into_internal_error)? {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill().map_err(Error::into_internal_error)?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut line = line;
    line["agentExit"] = json!(status);
    println!("{line}");
    Ok(())
}
