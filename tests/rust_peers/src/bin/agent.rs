//! A Rust ACP agent over stdio on the `agent-client-protocol` crate (protocol v1).
//!
//! One scripted `session/prompt` turn: two `agent_message_chunk` updates, a tool call (`tool_call`, then
//! `session/request_permission`, `fs/read_text_file` of `<cwd>/notes.txt`, the `_test.dev/echo` extension
//! request, `tool_call_update` completed), a closing chunk, then `end_turn`. The prompt's answer carries, under
//! `_meta["test.dev/seen"]`, the `_meta` the SDK handed the prompt handler, passed on as it was received.
//! Every handler logs what it was handed (`ACP_RUST_PEER_LOG`, see the library).

use acp_otel_rust_peers::{EchoRequest, Meta, log_seen};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, ContentBlock, ContentChunk, Implementation, InitializeRequest,
    InitializeResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, ReadTextFileRequest,
    RequestPermissionOutcome, RequestPermissionRequest, SessionId, SessionNotification,
    SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::{Agent, Client, Error, Stdio, on_receive_request};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

const TOOL_CALL_ID: &str = "rust-call-1";

fn text(words: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(words))
}

fn say(cx: &ConnectionTo<Client>, session: &SessionId, words: &str) -> Result<(), Error> {
    let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(text(words)));
    cx.send_notification(SessionNotification::new(session.clone(), chunk))
}

fn update(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    change: SessionUpdate,
) -> Result<(), Error> {
    cx.send_notification(SessionNotification::new(session.clone(), change))
}

/// The turn, run outside the dispatch loop (a handler that awaited the client's answers would hold it).
async fn turn(
    cx: ConnectionTo<Client>,
    session: SessionId,
    cwd: PathBuf,
    seen: Option<Meta>,
) -> Result<PromptResponse, Error> {
    say(&cx, &session, "Hello from the Rust SDK. ")?;
    say(&cx, &session, "Reading your notes.")?;
    let path = cwd.join("notes.txt");
    let call = ToolCall::new(TOOL_CALL_ID, "Read notes.txt")
        .name("read_file")
        .kind(ToolKind::Read)
        .status(ToolCallStatus::Pending);
    update(&cx, &session, SessionUpdate::ToolCall(call))?;
    let asked = ToolCallUpdate::new(
        TOOL_CALL_ID,
        ToolCallUpdateFields::new()
            .title("Read notes.txt")
            .kind(ToolKind::Read)
            .status(ToolCallStatus::Pending),
    );
    let options = vec![
        PermissionOption::new("allow", "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
    ];
    let permission = cx
        .send_request(RequestPermissionRequest::new(
            session.clone(),
            asked,
            options,
        ))
        .block_task()
        .await?;
    let allowed = matches!(&permission.outcome, RequestPermissionOutcome::Selected(chosen) if &*chosen.option_id.0 == "allow");
    let status = if allowed {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    };
    let mut result = String::from("permission refused");
    if allowed {
        let file = cx
            .send_request(ReadTextFileRequest::new(session.clone(), path))
            .block_task()
            .await?;
        let echo = cx
            .send_request(EchoRequest {
                session_id: session.0.to_string(),
                value: 42,
            })
            .block_task()
            .await?;
        result = format!("{} bytes read, echo {}", file.content.len(), echo.echo);
    }
    let done = ToolCallUpdateFields::new()
        .status(status)
        .content(vec![ToolCallContent::from(text(&result))]);
    update(
        &cx,
        &session,
        SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(TOOL_CALL_ID, done)),
    )?;
    say(&cx, &session, " Done.")?;
    let mut answer = Meta::new();
    answer.insert(
        "test.dev/seen".into(),
        seen.map_or(Value::Null, Value::Object),
    );
    Ok(PromptResponse::new(StopReason::EndTurn).meta(answer))
}

fn main() -> Result<(), Error> {
    let sessions: Arc<Mutex<Vec<(SessionId, PathBuf)>>> = Arc::default();
    let on_new = sessions.clone();
    futures::executor::block_on(
        Agent
            .v1()
            .name("rust-test-agent")
            .on_receive_request(
                async move |request: InitializeRequest, responder, _cx| {
                    log_seen("agent", "initialize", request.meta.as_ref());
                    responder.respond(
                        InitializeResponse::new(ProtocolVersion::V1)
                            .agent_capabilities(AgentCapabilities::new())
                            .agent_info(Implementation::new("rust-test-agent", "1.0.0")),
                    )
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: NewSessionRequest, responder, _cx| {
                    log_seen("agent", "session/new", request.meta.as_ref());
                    let mut known = on_new.lock().expect("sessions");
                    let id = SessionId::new(format!("rust-sess-{}", known.len() + 1));
                    known.push((id.clone(), request.cwd));
                    responder.respond(NewSessionResponse::new(id))
                },
                on_receive_request!(),
            )
            .on_receive_request(
                async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                    log_seen("agent", "session/prompt", request.meta.as_ref());
                    let cwd = sessions
                        .lock()
                        .expect("sessions")
                        .iter()
                        .find(|(id, _)| *id == request.session_id)
                        .map(|(_, cwd)| cwd.clone());
                    let Some(cwd) = cwd else {
                        return responder
                            .respond_with_error(Error::invalid_params().data("unknown session"));
                    };
                    let task = turn(cx.clone(), request.session_id, cwd, request.meta);
                    cx.spawn(async move {
                        match task.await {
                            Ok(answer) => responder.respond(answer),
                            Err(error) => responder.respond_with_error(error),
                        }
                    })
                },
                on_receive_request!(),
            )
            .connect_to(Stdio::new()),
    )
}
