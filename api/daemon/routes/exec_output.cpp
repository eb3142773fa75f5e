// Command output as the API gives it (exec_output.hpp).
#include "api/daemon/routes/exec_output.hpp"

#include "api/daemon/api_error.hpp"
#include "api/daemon/routes/resource_json.hpp"

namespace nanovm::daemon {

using nlohmann::json;

OutputEncoding output_encoding(const JsonBody& body) {
    const auto e = body.string("output_encoding", 64);
    if (!e || *e == "utf8") return OutputEncoding::utf8;
    if (*e == "base64") return OutputEncoding::base64;
    throw ApiError("invalid_value", "\"output_encoding\" must be \"utf8\" or \"base64\"");
}

bool OutputLines::line(const json& value) {
    return sink_.write(value.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
}

bool OutputLines::data(bool is_stderr, std::string_view bytes) {
    const std::string text =
        encoding_ == OutputEncoding::base64 ? base64_encode(bytes) : text_[is_stderr].feed(bytes);
    if (text.empty()) return true;
    return line(json{{"type", is_stderr ? "stderr" : "stdout"}, {"data", text}});
}

bool OutputLines::finish() {
    bool ok = true;
    for (int s = 0; s < 2; ++s) {
        const std::string rest = text_[s].finish();
        if (!rest.empty()) ok = line(json{{"type", s ? "stderr" : "stdout"}, {"data", rest}}) && ok;
    }
    return ok;
}

ExecSinks OutputLines::sinks() {
    return ExecSinks{[this](std::string_view d) { return data(false, d); },
                     [this](std::string_view d) { return data(true, d); }, [this] { return sink_.client_gone(); }};
}

http::Response exec_answer(bool stream, OutputEncoding encoding, const std::function<void()>& check,
                           std::function<ExecOutcome(const ExecSinks*)> run) {
    const bool base64 = encoding == OutputEncoding::base64;
    if (!stream) return json_response(200, exec_result_json(run(nullptr), base64));
    check();  // refusals (404, 409) answer before the stream starts
    http::Response r;
    r.content_type = "application/x-ndjson";
    r.stream = [encoding, base64, run = std::move(run)](http::StreamSink& sink) {
        OutputLines lines(sink, encoding);
        const ExecSinks sinks = lines.sinks();
        try {
            const ExecOutcome out = run(&sinks);
            lines.finish();
            json exit = exec_result_json(out, base64);
            exit.erase("stdout");
            if (out.start_error.empty()) exit.erase("stderr");
            exit["type"] = "exit";
            lines.line(exit);
        } catch (const ApiError& e) {
            lines.line(json{{"type", "error"}, {"error", {{"code", e.code()}, {"message", e.what()}}}});
        }
    };
    return r;
}

}  // namespace nanovm::daemon
