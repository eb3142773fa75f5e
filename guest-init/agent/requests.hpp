// Starting requests: from a request frame (EXEC, FILE_READ, STAT, SESSION_OPEN...) to
// either an immediate answer or a job on the connection.
#pragma once

#include "guest-init/protocol/frame_io.hpp"

namespace nanovm::agent {

class Connection;

/// Handles request frame `frame` on `connection` (its id is non-zero and free, and
/// the job limit allows one more). Returns false if the payload does not decode: a
/// protocol error for the caller; anything else is answered (OK, ERROR, a result,
/// or a job that answers later).
bool handle_request(Connection& connection, const proto::Frame& frame);

}  // namespace nanovm::agent
