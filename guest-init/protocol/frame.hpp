// The guest agent protocol's framing: what every frame looks like on the byte stream,
// the message types, and the limits. Shared by the agent (guest-init/agent/, built
// without exceptions) and the host client (api/agent_client/): standard headers only,
// nothing here throws.
//
// Transport: one byte stream per connection (a vsock stream in a guest, a Unix socket
// when the agent runs as a host process). Many requests are multiplexed on one
// connection, each under a request id the client picks; messages.hpp describes the
// payloads and the frames each request exchanges.
//
// Frame layout (all integers little-endian):
//
//     offset 0  u32  payload length in bytes, 0 .. kMaxPayload
//     offset 4  u8   message type (MessageType)
//     offset 5  u32  request id (0: the connection itself: HELLO, PING, fatal errors)
//     offset 9  payload
//
// A reader checks the type and the length as soon as the 9 header bytes are in: an
// unknown type (or one that flows the other way) or a length above kMaxPayload is a
// protocol error, as is a connection that ends inside a frame. On a protocol error
// the agent sends ERROR (id 0) and closes that connection; other connections go on.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nanovm::agent::proto {

/// The newest protocol version this code speaks. HELLO negotiates one version per
/// connection (messages.hpp): the highest both sides speak.
///   1: everything up to SESSION_CLOSE.
///   2: adds RESYNC.
///   3: adds the detached background jobs (JOB_START ... JOB_FORGET).
/// A newer version only adds message types (message_first_version). Both sides
/// still speak every version from kMinProtocolVersion: a restored snapshot may run
/// an older agent, and an older client may talk to a newer agent.
inline constexpr uint32_t kProtocolVersion = 3;

/// The oldest protocol version this code still speaks.
inline constexpr uint32_t kMinProtocolVersion = 1;

/// The vsock port the agent listens on inside a guest (host side: write
/// `CONNECT 1024\n` to the VMM's vsock Unix socket).
inline constexpr uint32_t kAgentVsockPort = 1024;

/// Bytes of a frame header.
inline constexpr size_t kFrameHeaderSize = 9;

/// The largest payload a frame may carry, bytes (1 MiB).
inline constexpr uint32_t kMaxPayload = 1u << 20;

/// The request id of connection-level frames (HELLO, PING/PONG, fatal ERROR).
inline constexpr uint32_t kConnectionId = 0;

/// Message types. 0x01-0x7f flow from the client (host) to the agent, 0x80-0xff
/// from the agent to the client. Payload encodings: messages.hpp.
enum class MessageType : uint8_t {
    // client -> agent
    kHello = 0x01,         ///< version negotiation; must be the first frame (id 0)
    kPing = 0x02,          ///< health check (id 0); payload echoed in PONG
    kShutdown = 0x03,      ///< power the guest off or reboot it
    kResync = 0x04,        ///< after a restore or fork: reseed the RNG, set clock and hostname
    kExec = 0x10,          ///< start a command
    kStdin = 0x11,         ///< raw bytes for a running command's stdin
    kStdinClose = 0x12,    ///< close that stdin (EOF for the command)
    kSignal = 0x13,        ///< send a signal to a command's process group
    kCancel = 0x14,        ///< abandon a request (kills a command, drops a transfer)
    kFileRead = 0x20,      ///< stream a file's contents back
    kFileWrite = 0x21,     ///< start writing a file (temp file, renamed at the end)
    kWriteData = 0x22,     ///< raw bytes for a file being written
    kWriteEnd = 0x23,      ///< all bytes sent: fsync (optionally), rename
    kList = 0x24,          ///< directory entries with their stat
    kStat = 0x25,          ///< stat one path
    kMkdir = 0x26,         ///< mkdir (-p)
    kRemove = 0x27,        ///< unlink / rmdir / rm -r
    kChmod = 0x28,         ///< chmod
    kSessionOpen = 0x30,   ///< start a persistent shell under a name
    kSessionRun = 0x31,    ///< run a shell command in that shell
    kSessionClose = 0x32,  ///< end that shell
    kJobStart = 0x40,      ///< (v3) start a detached background job
    kJobList = 0x41,       ///< (v3) the background jobs
    kJobAttach = 0x42,     ///< (v3) a job's buffered output, then (follow) its live output
    kJobStdin = 0x43,      ///< (v3) bytes for a job's stdin
    kJobStdinClose = 0x44, ///< (v3) close a job's stdin
    kJobSignal = 0x45,     ///< (v3) a signal for a job's process group
    kJobWait = 0x46,       ///< (v3) wait for a job to end
    kJobForget = 0x47,     ///< (v3) drop an ended job and its output

    // agent -> client
    kHelloReply = 0x81,  ///< the negotiated version
    kPong = 0x82,        ///< answer to PING
    kError = 0x83,       ///< a request failed (errno name + message); id 0: fatal
    kOk = 0x84,          ///< a request without a result succeeded
    kStdout = 0x90,      ///< raw bytes a command wrote to stdout
    kStderr = 0x91,      ///< raw bytes a command wrote to stderr
    kExit = 0x92,        ///< a command ended: exit code or signal; last frame of it
    kReadData = 0xa0,    ///< raw bytes of a file being read
    kDone = 0xa1,        ///< a read, list or write finished: byte or entry count
    kDirEntries = 0xa4,  ///< a batch of directory entries
    kStatReply = 0xa5,   ///< stat of one path
    kJobStarted = 0xb0,    ///< (v3) a background job's id
    kJobListReply = 0xb1,  ///< (v3) the background jobs
    kJobOutput = 0xb2,     ///< (v3) a piece of a job's output, with its stream and offset
};

/// True for the types a client may send (the agent accepts exactly these).
bool is_client_message(MessageType type);

/// True for the types an agent may send (the client accepts exactly these).
bool is_agent_message(MessageType type);

/// The first protocol version that has `type` (1 for most). On a connection that
/// negotiated an older version, a frame of that type is as unknown as any other.
uint32_t message_first_version(MessageType type);

/// A short upper-case name ("EXEC", "STDOUT"...) for logs; "?" if unknown.
const char* message_type_name(MessageType type);

/// A decoded frame header.
struct FrameHeader {
    uint32_t payload_length = 0;  ///< bytes after the header
    MessageType type{};
    uint32_t id = 0;  ///< request id
};

/// Writes `header` into `out[0..kFrameHeaderSize)`.
void encode_frame_header(const FrameHeader& header, unsigned char* out);

/// Reads a header from `in[0..kFrameHeaderSize)` (no validity checks).
FrameHeader decode_frame_header(const unsigned char* in);

}  // namespace nanovm::agent::proto
