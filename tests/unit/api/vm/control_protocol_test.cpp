// The control socket's codec (api/vm/control_protocol.hpp).
#include <catch2/catch.hpp>

#include "api/vm/control_protocol.hpp"

using namespace nanovm::vm;
using nlohmann::json;

TEST_CASE("a control request is a JSON object with a command string", "[api][vm][control]") {
    const ControlRequest r = parse_control_request(R"({"command": "stop", "force": true})");
    CHECK(r.command == "stop");
    CHECK(r.body["force"] == true);
    const std::string line = format_control_request("stop", json{{"timeout_ms", 5}});
    CHECK(line.back() == '\n');
    const ControlRequest back = parse_control_request(line.substr(0, line.size() - 1));
    CHECK(back.command == "stop");
    CHECK(back.body["timeout_ms"] == 5);
}

TEST_CASE("malformed control requests are protocol errors with a reason", "[api][vm][control]") {
    CHECK_THROWS_WITH(parse_control_request("status"), Catch::Contains("not JSON"));
    CHECK_THROWS_WITH(parse_control_request("{\"command\":"), Catch::Contains("not JSON"));
    CHECK_THROWS_WITH(parse_control_request("[1,2]"), Catch::Contains("not a JSON object"));
    CHECK_THROWS_WITH(parse_control_request("{}"), Catch::Contains("no \"command\""));
    CHECK_THROWS_WITH(parse_control_request("{\"command\": 7}"), Catch::Contains("no \"command\""));
    CHECK_THROWS_WITH(parse_control_request("{\"command\": \"\"}"), Catch::Contains("empty"));
    CHECK_THROWS_AS(parse_control_request(std::string(kMaxControlLine + 1, ' ')), ControlProtocolError);
    // Deep nesting within the line limit is parsed (or refused) without crashing.
    const std::string deep = std::string(30000, '[') + std::string(30000, ']');
    CHECK_THROWS_AS(parse_control_request(deep), ControlProtocolError);
    CHECK_THROWS_AS(parse_control_request(std::string("{\"command\":\"\xff\xfe\"}")), ControlProtocolError);
}

TEST_CASE("answers: ok carries fields, an error carries its message", "[api][vm][control]") {
    const std::string ok = format_ok(json{{"state", "paused"}});
    const json answer = parse_control_answer(ok.substr(0, ok.size() - 1));
    CHECK(answer["ok"] == true);
    CHECK(answer["state"] == "paused");
    const std::string err = format_error("cannot pause: the VM is stopping");
    CHECK_THROWS_WITH(parse_control_answer(err.substr(0, err.size() - 1)), "cannot pause: the VM is stopping");
    CHECK_THROWS_AS(parse_control_answer("{\"state\": 1}"), ControlProtocolError);
    CHECK_THROWS_AS(parse_control_answer("{\"ok\": false}"), ControlProtocolError);
    // Invalid UTF-8 in a field never throws while formatting.
    CHECK(format_ok(json{{"path", std::string("a\xff")}}).back() == '\n');
}

TEST_CASE("LineBuffer splits lines across reads and bounds their length", "[api][vm][control]") {
    LineBuffer lines(16);
    lines.append("{\"a\":1}\n{\"b\"");
    CHECK(lines.next_line() == "{\"a\":1}");
    CHECK_FALSE(lines.next_line().has_value());
    lines.append(":2}\r\n\n");
    CHECK(lines.next_line() == "{\"b\":2}");
    CHECK(lines.next_line() == "");
    CHECK_FALSE(lines.next_line().has_value());
    CHECK(lines.pending() == 0);
    lines.append(std::string(17, 'x'));
    CHECK_THROWS_AS(lines.next_line(), ControlProtocolError);
    LineBuffer complete(4);
    complete.append("abcdefgh\n");
    CHECK_THROWS_AS(complete.next_line(), ControlProtocolError);
}
