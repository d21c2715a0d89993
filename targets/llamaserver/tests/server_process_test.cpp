// kvweld's llama-server process and HTTP exchange against a stand-in that
// behaves, or fails, one way per test (stand_in_server.cpp), and against the
// pinned llama-server where the cache has it: started on 127.0.0.1 at the
// port its log names, stopped by its PID, every failure an Error that names
// the value and the limit, and nothing left running.
#include "targets/llamaserver/http.hpp"
#include "targets/llamaserver/server_process.hpp"

#include "engine/gguf.hpp"
#include "util/error.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvweld::targets::llamaserver {
namespace {

std::string temp_prefix() { return "kvweld-" + std::to_string(::getpid()) + "-"; }
std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / (temp_prefix() + name)).string();
}

// The servers' logs this program wrote, removed at its end where every test
// passed (a failure's logs stay, for the Error that quotes them).
class TempLogs : public ::testing::Environment {
public:
    void TearDown() override {
        if (!::testing::UnitTest::GetInstance()->Passed()) return;
        std::error_code ec;
        for (const auto& f : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec))
            if (f.path().filename().string().rfind(temp_prefix(), 0) == 0) std::filesystem::remove(f.path(), ec);
    }
};
const auto* const kTempLogs = ::testing::AddGlobalTestEnvironment(new TempLogs);

ServerSetup stand_in(const std::string& mode, double timeout_s = 10) {
    return {KVWELD_STAND_IN_SERVER, "model.gguf", {mode}, temp_path(mode + ".log"), timeout_s};
}

// An Error's text, or "" where `f` threw none.
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ServerProcess, StartsAtThePortItsLogNamesAndStopsByItsPid) {
    ServerProcess server(stand_in("serve"));
    ASSERT_GT(server.port(), 0);
    const pid_t pid = server.pid();
    EXPECT_EQ(http_request(server.port(), "GET", "/health", "", 5).status, 200);
    const HttpAnswer a = http_request(server.port(), "POST", "/completion", "{\"prompt\": [1]}", 5);
    EXPECT_EQ(a.status, 200);
    EXPECT_EQ(a.body, "{\"tokens\": [7]}");
    server.stop();
    EXPECT_FALSE(server.running());
    EXPECT_TRUE(WIFSIGNALED(server.wait_status()) && WTERMSIG(server.wait_status()) == SIGTERM);
    EXPECT_EQ(::kill(pid, 0), -1) << "the process is gone and reaped";
}

TEST(ServerProcess, AServerThatExitsWhileStartingIsAnErrorQuotingItsLog) {
    const std::string e = error_of([] { ServerProcess server(stand_in("exit")); });
    EXPECT_NE(e.find("ended while starting (exit 3)"), std::string::npos) << e;
    EXPECT_NE(e.find("failed to load model 'none.gguf'"), std::string::npos) << e;
}

TEST(ServerProcess, NoAnswerWithinTheLimitIsAnErrorAndNothingIsLeftRunning) {
    const std::string e = error_of([] { ServerProcess server(stand_in("silent", 0.3)); });
    EXPECT_NE(e.find("no answer to /health within 0.3 s (no port in its log)"), std::string::npos) << e;
    // The stand-in's process was stopped by its PID: no child is left to reap.
    EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

TEST(ServerProcess, AServerThatIgnoresSigtermIsKilled) {
    ServerProcess server(stand_in("ignore_term"));
    server.stop(0.2);
    EXPECT_TRUE(WIFSIGNALED(server.wait_status()) && WTERMSIG(server.wait_status()) == SIGKILL);
}

TEST(Http, AHungRequestEndsAtItsDeadline) {
    ServerProcess server(stand_in("hang"));
    const std::string e = error_of([&] { http_request(server.port(), "POST", "/completion", "{}", 0.3); });
    EXPECT_NE(e.find("POST http://127.0.0.1:" + std::to_string(server.port()) + "/completion: no whole answer within 0.3 s"),
              std::string::npos)
        << e;
}

TEST(Http, AServerErrorIsAnAnswerTheCallerJudges) {
    ServerProcess server(stand_in("error"));
    const HttpAnswer a = http_request(server.port(), "POST", "/completion", "{}", 5);
    EXPECT_EQ(a.status, 500);
    EXPECT_NE(a.body.find("stand-in failure"), std::string::npos);
}

TEST(Http, ARefusedConnectionIsAnError) {
    int port = 0;
    {
        ServerProcess server(stand_in("serve"));
        port = server.port();
    }
    const std::string e = error_of([&] { http_request(port, "GET", "/health", "", 1); });
    EXPECT_NE(e.find("cannot connect"), std::string::npos) << e;
}

// The pinned llama-server on a model kvweld wrote with the test vocabulary:
// it starts, generates the tokens asked for, and is stopped.
TEST(ServerProcess, ThePinnedLlamaServerGeneratesAndStops) {
    const std::string binary = KVWELD_LLAMA_SERVER;
    if (binary.empty() || !std::filesystem::exists(binary)) GTEST_SKIP() << "no llama-server in the cache: " << binary;
    const std::string model = temp_path("server-model.gguf");
    save_gguf(Model::random(config_by_name("small"), 1), model, Vocab::test);
    ServerProcess server({binary, model, {"-np", "1", "-c", "128", "-t", "1", "--no-warmup"}, temp_path("server.log"), 60});
    const HttpAnswer a = http_request(server.port(), "POST", "/completion",
                                      "{\"prompt\": [5, 6, 7], \"n_predict\": 3, \"temperature\": 0, \"return_tokens\": true}", 60);
    EXPECT_EQ(a.status, 200) << a.body;
    EXPECT_NE(a.body.find("\"tokens\":["), std::string::npos) << a.body;
    server.stop();
    EXPECT_FALSE(server.running());
    std::filesystem::remove(model);
}

}  // namespace
}  // namespace kvweld::targets::llamaserver
