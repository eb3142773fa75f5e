// Frame headers and message type tables (see frame.hpp).
#include "guest-init/protocol/frame.hpp"

namespace nanovm::agent::proto {

bool is_client_message(MessageType type) {
    switch (type) {
        case MessageType::kHello:
        case MessageType::kPing:
        case MessageType::kShutdown:
        case MessageType::kResync:
        case MessageType::kExec:
        case MessageType::kStdin:
        case MessageType::kStdinClose:
        case MessageType::kSignal:
        case MessageType::kCancel:
        case MessageType::kFileRead:
        case MessageType::kFileWrite:
        case MessageType::kWriteData:
        case MessageType::kWriteEnd:
        case MessageType::kList:
        case MessageType::kStat:
        case MessageType::kMkdir:
        case MessageType::kRemove:
        case MessageType::kChmod:
        case MessageType::kSessionOpen:
        case MessageType::kSessionRun:
        case MessageType::kSessionClose:
        case MessageType::kJobStart:
        case MessageType::kJobList:
        case MessageType::kJobAttach:
        case MessageType::kJobStdin:
        case MessageType::kJobStdinClose:
        case MessageType::kJobSignal:
        case MessageType::kJobWait:
        case MessageType::kJobForget:
            return true;
        default:
            return false;
    }
}

bool is_agent_message(MessageType type) {
    switch (type) {
        case MessageType::kHelloReply:
        case MessageType::kPong:
        case MessageType::kError:
        case MessageType::kOk:
        case MessageType::kStdout:
        case MessageType::kStderr:
        case MessageType::kExit:
        case MessageType::kReadData:
        case MessageType::kDone:
        case MessageType::kDirEntries:
        case MessageType::kStatReply:
        case MessageType::kJobStarted:
        case MessageType::kJobListReply:
        case MessageType::kJobOutput:
            return true;
        default:
            return false;
    }
}

uint32_t message_first_version(MessageType type) {
    if (type == MessageType::kResync) return 2;
    // The background jobs: requests 0x40-0x47, answers 0xb0-0xb2.
    const auto code = static_cast<uint8_t>(type);
    if ((code >= 0x40 && code <= 0x47) || (code >= 0xb0 && code <= 0xb2)) return 3;
    return 1;
}

const char* message_type_name(MessageType type) {
    switch (type) {
        case MessageType::kHello: return "HELLO";
        case MessageType::kPing: return "PING";
        case MessageType::kShutdown: return "SHUTDOWN";
        case MessageType::kResync: return "RESYNC";
        case MessageType::kExec: return "EXEC";
        case MessageType::kStdin: return "STDIN";
        case MessageType::kStdinClose: return "STDIN_CLOSE";
        case MessageType::kSignal: return "SIGNAL";
        case MessageType::kCancel: return "CANCEL";
        case MessageType::kFileRead: return "FILE_READ";
        case MessageType::kFileWrite: return "FILE_WRITE";
        case MessageType::kWriteData: return "WRITE_DATA";
        case MessageType::kWriteEnd: return "WRITE_END";
        case MessageType::kList: return "LIST";
        case MessageType::kStat: return "STAT";
        case MessageType::kMkdir: return "MKDIR";
        case MessageType::kRemove: return "REMOVE";
        case MessageType::kChmod: return "CHMOD";
        case MessageType::kSessionOpen: return "SESSION_OPEN";
        case MessageType::kSessionRun: return "SESSION_RUN";
        case MessageType::kSessionClose: return "SESSION_CLOSE";
        case MessageType::kHelloReply: return "HELLO_REPLY";
        case MessageType::kPong: return "PONG";
        case MessageType::kError: return "ERROR";
        case MessageType::kOk: return "OK";
        case MessageType::kStdout: return "STDOUT";
        case MessageType::kStderr: return "STDERR";
        case MessageType::kExit: return "EXIT";
        case MessageType::kReadData: return "READ_DATA";
        case MessageType::kDone: return "DONE";
        case MessageType::kDirEntries: return "DIR_ENTRIES";
        case MessageType::kStatReply: return "STAT_REPLY";
        case MessageType::kJobStart: return "JOB_START";
        case MessageType::kJobList: return "JOB_LIST";
        case MessageType::kJobAttach: return "JOB_ATTACH";
        case MessageType::kJobStdin: return "JOB_STDIN";
        case MessageType::kJobStdinClose: return "JOB_STDIN_CLOSE";
        case MessageType::kJobSignal: return "JOB_SIGNAL";
        case MessageType::kJobWait: return "JOB_WAIT";
        case MessageType::kJobForget: return "JOB_FORGET";
        case MessageType::kJobStarted: return "JOB_STARTED";
        case MessageType::kJobListReply: return "JOB_LIST_REPLY";
        case MessageType::kJobOutput: return "JOB_OUTPUT";
    }
    return "?";
}

namespace {
void put_u32(unsigned char* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
    return v;
}
}  // namespace

void encode_frame_header(const FrameHeader& header, unsigned char* out) {
    put_u32(out, header.payload_length);
    out[4] = static_cast<unsigned char>(header.type);
    put_u32(out + 5, header.id);
}

FrameHeader decode_frame_header(const unsigned char* in) {
    FrameHeader h;
    h.payload_length = get_u32(in);
    h.type = static_cast<MessageType>(in[4]);
    h.id = get_u32(in + 5);
    return h;
}

}  // namespace nanovm::agent::proto
