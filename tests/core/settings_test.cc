// The settings registry: one table of bad values, each rejected with an error naming the
// variable and the value; good values in every notation; aliases; the consumers that used to crash
// or hang on a bad value (slot size, tuning file, flight recorder, timeouts); every COMMX_*
// variable in the sources declared; docs/env.md current.
// Layer: tests (core).
#include "core/settings.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "backends/cpu/cpu_tuning.h"
#include "commx/error.h"
#include "core/env.h"
#include "core/tuning.h"
#include "lowp/lowp_config.h"
#include "scoped_env.h"

using namespace commx;
using commx::test::ScopedEnv;

namespace {


// Reads `name` the way its declared type is read.
void read_as_declared(const char* name) {
  switch (setting_spec(name).type) {
    case SettingType::kBool:
      setting_bool(name, false);
      break;
    case SettingType::kInt:
      setting_int(name, 0);
      break;
    case SettingType::kBytes:
      setting_bytes(name, 0);
      break;
    case SettingType::kSeconds:
      setting_seconds(name, 1);
      break;
    default:
      setting_str(name);
      break;
  }
}

struct BadValue {
  const char* name;
  const char* value;
  const char* why;  // part of the expected message
};

const BadValue kBadValues[] = {
    {"COMMX_TIMEOUT_SECONDS", "1e30", "out of range"},
    {"COMMX_TIMEOUT_SECONDS", "-1", "out of range"},
    {"COMMX_TIMEOUT_SECONDS", "0", "out of range"},
    {"COMMX_TIMEOUT_SECONDS", "nan", "not a finite number"},
    {"COMMX_TIMEOUT_SECONDS", "inf", "not a finite number"},
    {"COMMX_TIMEOUT_SECONDS", "-inf", "not a finite number"},
    {"COMMX_TIMEOUT_SECONDS", "10s", "not a finite number"},
    {"COMMX_TIMEOUT_SECONDS", " 5", "not a finite number"},
    {"COMMX_FLIGHT_RECORDER_SIZE", "-1", "out of range"},
    {"COMMX_FLIGHT_RECORDER_SIZE", "99999999999", "out of range"},
    {"COMMX_FLIGHT_RECORDER_SIZE", "99999999999999999999999", "not an integer"},
    {"COMMX_FLIGHT_RECORDER_SIZE", "1.5", "not an integer"},
    {"COMMX_CPU_SLOT_BYTES", "-4096", "not a byte count"},
    {"COMMX_CPU_SLOT_BYTES", "4096", "out of range"},
    {"COMMX_CPU_SLOT_BYTES", "1T", "not a byte count"},
    {"COMMX_CPU_RING_BYTES", "nan", "not a byte count"},
    {"COMMX_CPU_CHUNK_BYTES", "0", "out of range"},
    {"COMMX_CPU_CMA", "2", "not a boolean"},
    {"COMMX_CPU_SPIN_NS", "-5", "out of range"},
    {"COMMX_CPU_BROADCAST_CMA_MIN_BYTES", "-2", "out of range"},
    {"COMMX_ABORT_ON_ERROR", "maybe", "not a boolean"},
    {"COMMX_STORE_HOSTED", "10", "not a boolean"},
    {"COMMX_STORE_MAX_CONNECTIONS", "1e3", "not an integer"},
    {"COMMX_STORE_MAX_VALUE_BYTES", "1e30", "out of range"},
    {"COMMX_STORE_IDLE_TIMEOUT_SECONDS", "inf", "not a finite number"},
    {"COMMX_STORE_HANDSHAKE_TIMEOUT_SECONDS", "0", "out of range"},
    {"COMMX_SOCKET_REFUSED_GRACE_MS", "-5", "out of range"},
    {"COMMX_RANK", "-1", "out of range"},
    {"COMMX_WORLD_SIZE", "0", "out of range"},
    {"COMMX_CUDA_PEER_MEM", "shm", "not one of ipc,vmm"},
    {"COMMX_CUDA_MAX_BLOCKS", "0", "out of range"},
    {"COMMX_LOW_PRECISION_FORMAT", "e3m4", "not one of"},
    {"COMMX_LOW_PRECISION_BLOCK", "0", "out of range"},
    {"COMMX_DDA_ENABLE", "maybe", "not a boolean"},
    {"RCCL_DDA_ENABLE", "maybe", "not a boolean"},
    {"RCCL_LOW_PRECISION_ENABLE", "fp4", "not one of"},
    {"COMMX_TRACE_DIR", "/tmp/a\nb", "line break"},
};

TEST(Settings, EveryBadValueIsAClearError) {
  for (const BadValue& b : kBadValues) {
    ScopedEnv env(b.name, b.value);
    const char* canonical = setting_spec(b.name).name;
    try {
      read_as_declared(canonical);
      ADD_FAILURE() << b.name << "='" << b.value << "' was accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << msg;
      EXPECT_NE(msg.find(std::string(b.name) + "='" + b.value + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(b.why), std::string::npos) << b.name << "=" << b.value << ": " << msg;
    }
    // The older helpers validate declared variables the same way.
    if (setting_spec(b.name).type == SettingType::kInt) {
      EXPECT_THROW(env_int(canonical, 0), Error);
    }
  }
}

TEST(Settings, GoodValuesInEveryNotation) {
  {
    ScopedEnv e("COMMX_CPU_SLOT_BYTES", "64K");
    EXPECT_EQ(setting_bytes("COMMX_CPU_SLOT_BYTES", 0), 65536u);
  }
  {
    ScopedEnv e("COMMX_CPU_SLOT_BYTES", "1.5MiB");
    EXPECT_EQ(setting_bytes("COMMX_CPU_SLOT_BYTES", 0), 1572864u);
  }
  {
    ScopedEnv e("COMMX_CPU_SLOT_BYTES", "131072");
    EXPECT_EQ(env_int("COMMX_CPU_SLOT_BYTES", 0), 131072);
  }
  for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) {
    ScopedEnv e("COMMX_ABORT_ON_ERROR", yes);
    EXPECT_TRUE(setting_bool("COMMX_ABORT_ON_ERROR")) << yes;
  }
  for (const char* no : {"0", "false", "No", "off"}) {
    ScopedEnv e("COMMX_ABORT_ON_ERROR", no);
    EXPECT_FALSE(setting_bool("COMMX_ABORT_ON_ERROR")) << no;
  }
  {
    ScopedEnv e("COMMX_TIMEOUT_SECONDS", "0.25");
    EXPECT_DOUBLE_EQ(setting_seconds("COMMX_TIMEOUT_SECONDS"), 0.25);
  }
  // Unset and empty read as the table's default.
  {
    ScopedEnv e("COMMX_FLIGHT_RECORDER_SIZE", "");
    EXPECT_EQ(setting_int("COMMX_FLIGHT_RECORDER_SIZE"), 1024);
  }
  EXPECT_DOUBLE_EQ(setting_seconds("COMMX_STORE_IDLE_TIMEOUT_SECONDS"), 30.0);
  EXPECT_EQ(setting_bytes("COMMX_STORE_MAX_VALUE_BYTES"), uint64_t{256} << 20);
}

TEST(Settings, SeedAliasesAreHonoured) {
  {
    ScopedEnv e("RCCL_DDA_ENABLE", "0");
    EXPECT_FALSE(setting_bool("COMMX_DDA_ENABLE", true));
    EXPECT_FALSE(env_bool("COMMX_DDA_ENABLE", true));
    ScopedEnv c("COMMX_DDA_ENABLE", "1");  // the COMMX_ name wins
    EXPECT_TRUE(setting_bool("COMMX_DDA_ENABLE", false));
  }
  {
    ScopedEnv e("RCCL_LOW_PRECISION_ENABLE", "e5m2");
    lowp::LowpSettings s = lowp::resolve_lowp_settings({});
    EXPECT_TRUE(s.enabled);
    EXPECT_EQ(s.codec.format, lowp::Fp8Format::kE5M2);
  }
}

TEST(Settings, UndeclaredNamesAreRefusedByTheTypedReaders) {
  try {
    setting_int("COMMX_NOT_A_SETTING", 0);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("not declared"), std::string::npos);
  }
  EXPECT_THROW(setting_bool("COMMX_TIMEOUT_SECONDS", false), Error);  // declared as seconds
}

TEST(Settings, ConsumersRejectBadValuesInsteadOfCrashing) {
  {
    ScopedEnv e("COMMX_CPU_SLOT_BYTES", "-4096");  // segfaulted the first all_reduce
    EXPECT_THROW(CpuTuning::from_env(), Error);
  }
  {
    ScopedEnv e("COMMX_CPU_SLOT_BYTES", "100000");  // in range, not a multiple of 4096
    EXPECT_THROW(CpuTuning::from_env(), Error);
  }
  // Per-op and comm timeouts: NaN, infinite, huge and negative values are errors.
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL, 1e30, -1.0}) {
    try {
      timeout_from_seconds(bad, "op timeout");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("op timeout"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(timeout_from_seconds(1.5, "t"), std::chrono::milliseconds(1500));
  EXPECT_EQ(timeout_from_seconds(0, "t"), std::chrono::milliseconds(0));
}

// A tuning file that is a device, a folder, huge or binary: a clear error, at once.
TEST(Settings, TuningFileThatIsNotATable) {
  namespace fs = std::filesystem;
  std::string dir = testing::TempDir() + "commx_settings_" + std::to_string(getpid());
  fs::create_directories(dir);
  std::string big = dir + "/big.txt", binary = dir + "/binary.txt";
  {
    std::ofstream f(big);
    std::string line(1000, '#');
    for (int i = 0; i < 2000; ++i) f << line << "\n";
  }
  {
    std::ofstream f(binary);
    f << "all_reduce 2 0 max ring\n" << std::string("\x01\x02\xff garbage", 11) << "\n";
  }
  struct Case {
    std::string path;
    const char* why;
  };
  for (const Case& c : {Case{"/dev/urandom", "not a regular file"}, Case{dir, "not a regular file"},
                        Case{big, "over the limit"}, Case{binary, "not a text tuning table"},
                        Case{dir + "/missing", "cannot be opened"}}) {
    ScopedEnv e("COMMX_TUNING_FILE", c.path.c_str());
    auto t0 = std::chrono::steady_clock::now();
    try {
      TuningTable::from_env("");
      ADD_FAILURE() << c.path << " was accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(c.why), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find(c.path), std::string::npos) << err.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << c.path;
  }
  fs::remove_all(dir);
}

TEST(Settings, TableIsWellFormed) {
  for (const SettingSpec& s : setting_specs()) {
    EXPECT_EQ(std::string(s.name).rfind("COMMX_", 0), 0u) << s.name;
    EXPECT_GT(std::string(s.meaning).size(), 5u) << s.name;
    EXPECT_LE(s.min, s.max) << s.name;
    EXPECT_EQ(&setting_spec(s.name), &s) << s.name << " declared twice";
    if (s.type == SettingType::kChoice) {
      EXPECT_NE(s.choices, nullptr) << s.name;
    }
  }
}

// Every COMMX_* name quoted in the sources is declared (a new variable without a table row fails
// here, not in a user's job).
TEST(Settings, EveryVariableInTheSourcesIsDeclared) {
  namespace fs = std::filesystem;
  std::regex quoted("[\"'](COMMX_[A-Z0-9_]+|RCCL_[A-Z0-9_]+)[\"']");
  int files = 0;
  for (const char* top : {"src", "tools", "python/commx", "python/src"}) {
    for (auto& entry : fs::recursive_directory_iterator(fs::path(COMMX_SOURCE_DIR) / top)) {
      std::string ext = entry.path().extension();
      if (!entry.is_regular_file() || entry.path().filename() == "settings.cc") continue;
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".py") continue;
      std::ifstream f(entry.path());
      std::stringstream ss;
      ss << f.rdbuf();
      std::string text = ss.str();
      ++files;
      for (std::sregex_iterator it(text.begin(), text.end(), quoted), end; it != end; ++it) {
        std::string name = (*it)[1];
        EXPECT_NO_THROW(setting_spec(name)) << name << " in " << entry.path();
      }
    }
  }
  EXPECT_GT(files, 50);
}

// The environment is read in one place (src/core/env.cc and the registry in settings.cc): every
// other layer goes through commx/env.h or the registry, so every COMMX_* read is validated.
TEST(Settings, NoStrayGetenv) {
  namespace fs = std::filesystem;
  std::regex call("\\bgetenv\\s*\\(");
  for (const char* top : {"src", "tools", "python/src"}) {
    for (auto& entry : fs::recursive_directory_iterator(fs::path(COMMX_SOURCE_DIR) / top)) {
      const std::string name = entry.path().filename();
      std::string ext = entry.path().extension();
      if (!entry.is_regular_file() || name == "settings.cc" ||
          entry.path() == fs::path(COMMX_SOURCE_DIR) / "src/core/env.cc")
        continue;
      if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".cpp") continue;
      std::ifstream f(entry.path());
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string text = ss.str();
      EXPECT_FALSE(std::regex_search(text, call))
          << entry.path() << " reads the environment itself: use commx/env.h or core/settings.h";
    }
  }
}

TEST(Settings, DocsAreGeneratedFromTheTable) {
  std::ifstream f(std::string(COMMX_SOURCE_DIR) + "/docs/env.md");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), settings_markdown())
      << "docs/env.md is out of date: run build/bin/commx-env-doc > docs/env.md";
}

}  // namespace
