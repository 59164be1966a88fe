// SPDX-License-Identifier: Apache-2.0
// The run folder: written as the run goes, read back identically; corrupt folders fail with the file.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>

#include "experiment/arm_phases.h"
#include "experiment/report_render.h"
#include "experiment/run_folder.h"
#include "experiment_fixture.h"
#include "meter/window.h"

namespace tpscope::experiment {
namespace {

// Bounds on time below are for the plain build; a sanitizer's build runs the same work about ten times
// slower (the quadratic costs these bounds catch are a hundred times and more).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TPS_RECORD_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(TPS_RECORD_TEST_SANITIZED)
constexpr double kSlow = 10;
#else
constexpr double kSlow = 1;
#endif

using tpscope::testing::tempDir;
using tpscope::testing::writeStudyRun;

TEST(ExperimentRecord, RoundTrip) {
  const std::string dir = tempDir("record");
  const RunRecord written = writeStudyRun(dir, /*failed_attempt=*/true);
  const RunRecord read = readRun(dir);
  EXPECT_EQ(toJson(read.manifest), toJson(written.manifest));
  ASSERT_EQ(read.repetitions.size(), written.repetitions.size());
  EXPECT_EQ(read.repetitions.size(), 13u);  // 12 + one failed attempt, kept
  for (size_t i = 0; i < read.repetitions.size(); ++i)
    EXPECT_EQ(toJson(read.repetitions[i]), toJson(written.repetitions[i])) << i;
  ASSERT_EQ(read.samples.size(), written.samples.size());
  for (size_t i = 0; i < read.samples.size(); i += 97) EXPECT_EQ(toJson(read.samples[i]), toJson(written.samples[i]));
  EXPECT_EQ(read.manifest.effective.size(), 4u);
  EXPECT_EQ(read.manifest.effective[3].value("tokens_per_step"), "4");
  EXPECT_EQ(read.manifest.effective[3].find("tokens_per_step")->source, SettingSource::kArm);
  const RepetitionResult& failed = read.repetitions[7];
  EXPECT_EQ(failed.arm, "C");
  EXPECT_FALSE(failed.valid);
  EXPECT_FALSE(failed.quiesce.passed);
  EXPECT_EQ(failed.quiesce.other_pids, std::vector<unsigned>{4242});
  EXPECT_DOUBLE_EQ(*failed.quiesce.idle_mbps[1][1], 152.0);
  EXPECT_FALSE(failed.quiesce.idle_mbps[1][2].has_value());  // NVLink: N/A stays null, not 0
  std::filesystem::remove_all(dir);
}

TEST(ExperimentRecord, NullStaysNull) {
  RepetitionResult r;
  r.arm = "A";
  PhaseResult p;
  p.phase = "decode";
  GpuTraffic g;
  g.rx_mbps = 12.5;
  p.gpus.push_back(g);
  r.phases.push_back(p);
  const nlohmann::json j = toJson(r);
  EXPECT_TRUE(j["phases"][0]["gpus"][0]["pcie_tx_mbps"].is_null());
  EXPECT_TRUE(j["phases"][0]["gpus"][0]["dmon_rx_mbps"].is_null());
  const RepetitionResult back = repetitionFromJson(j);
  EXPECT_FALSE(back.phases[0].gpus[0].tx_mbps);
  EXPECT_DOUBLE_EQ(*back.phases[0].gpus[0].rx_mbps, 12.5);
}

void expectReadError(const std::string& dir, const std::string& part) {
  try {
    readRun(dir);
    FAIL() << "read " << dir;
  } catch (const RecordError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(ExperimentRecord, CorruptFolders) {
  expectReadError("/nonexistent/run", "does not exist");
  const std::string dir = tempDir("corrupt");
  std::filesystem::create_directories(dir);
  expectReadError(dir, "manifest.json is missing");
  std::ofstream(dir + "/manifest.json") << "{ not json";
  expectReadError(dir, "manifest.json is not valid JSON");
  std::ofstream(dir + "/manifest.json") << R"({"format": "tpscope-run/99", "arms": [], "phases": []})";
  expectReadError(dir, "format \"tpscope-run/99\"");
  std::ofstream(dir + "/manifest.json") << R"({"format": "tpscope-run/1"})";
  expectReadError(dir, "missing a field");
  std::filesystem::remove(dir + "/manifest.json");  // a new run is never written over another
  writeStudyRun(dir);
  std::ofstream(dir + "/results.jsonl", std::ios::app) << "{\"arm\": \"A\", truncated\n";
  expectReadError(dir, "results.jsonl:13: corrupt record");
  std::filesystem::remove(dir + "/results.jsonl");
  expectReadError(dir, "results.jsonl is missing");
  std::filesystem::remove_all(dir);
}

// Found by fuzz/experiment/run_folder_fuzz.cc: a recording.txt line that is not UTF-8 went into the
// report, and `tpscope report --format json` threw from the JSON writer.
TEST(ExperimentRecord, ARecordingLineThatIsNotUtf8IsRepaired) {
  const std::string manifest = R"({"format": "tpscope-run/1", "arms": ["A"], "phases": ["decode"],
                                   "start_time": "2026-12-01T10:00:00Z"})";
  const RunRecord run = parseRun("RUN", manifest, std::string(), std::nullopt, std::string("2x GPU \xff box\r\nmore"));
  EXPECT_EQ(run.manifest.recording, "Recorded run: 2026-12-01 on 2x GPU \xef\xbf\xbd box");
  EXPECT_NO_THROW((void)toJson(buildReport(run)).dump());
}

// Found by fuzz/experiment/run_folder_fuzz.cc: an integer too large for 64 bits parses as a float, and
// json's get<int64_t>() cast it unchecked (undefined behaviour); settings the report parses with stoi threw
// std::invalid_argument out of buildReport. Each is now a RecordError naming the file and the line or key.
TEST(ExperimentRecord, NumbersThatDoNotFitOrParseAreCorruptRecords) {
  const std::string dir = tempDir("record_numbers");
  writeStudyRun(dir);
  auto file = [&](const char* name) {
    std::ifstream f(dir + "/" + name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string manifest = file("manifest.json");
  const std::string results = file("results.jsonl");
  const nlohmann::json rep = nlohmann::json::parse(results.substr(0, results.find('\n')));
  auto expectCorrupt = [&](const nlohmann::json& line, const std::string& part) {
    try {
      parseRun(dir, manifest, line.dump() + "\n", std::nullopt, std::nullopt);
      ADD_FAILURE() << "read " << line.dump().substr(0, 200);
    } catch (const RecordError& e) {
      EXPECT_NE(std::string(e.what()).find("results.jsonl:1: corrupt record"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  ASSERT_NO_THROW(parseRun(dir, manifest, rep.dump() + "\n", std::nullopt, std::nullopt));
  nlohmann::json r = rep;
  r["phases"][0]["steps"] = nlohmann::json::parse("2559223372036854775808");  // a float, 2.6e21
  ASSERT_TRUE(r["phases"][0]["steps"].is_number_float());
  expectCorrupt(r, "2.559223372036855e+21 is not a whole number");
  r = rep, r["phases"][0]["steps"] = 1.5;
  expectCorrupt(r, "1.5 is not a whole number");
  r = rep, r["repetition"] = int64_t{3'000'000'000};  // an int field
  expectCorrupt(r, "out of range");
  r = rep, r["quiesce"]["other_pids"] = {-1};  // unsigned
  expectCorrupt(r, "out of range");
  r = rep, r["phases"][0]["gpus"][0]["samples"] = "many";
  expectCorrupt(r, "type must be a whole number, but is string");
  r = rep, r["phases"][0]["end_ns"] = 1e300;
  expectCorrupt(r, "1e+300 is not a whole number");

  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"devices", "0,x"}, {"devices", "0,-1"}, {"tokens_per_step", "99999999999"}, {"acceptance", "0.7x"}}) {
    nlohmann::json m = nlohmann::json::parse(manifest);
    bool present = false;
    for (nlohmann::json& s : m["effective"][0]["settings"])
      if (s["key"] == key) s["value"] = value, present = true;
    if (!present) m["effective"][0]["settings"].push_back({{"key", key}, {"value", value}, {"source", "arm"}});
    try {
      parseRun(dir, m.dump(), results, std::nullopt, std::nullopt);
      ADD_FAILURE() << key << " = " << value << " was read";
    } catch (const RecordError& e) {
      EXPECT_NE(std::string(e.what()).find("manifest.json: arm A has a " + key +
                                           " that does not parse or is out of its range: \"" + value),
                std::string::npos)
          << e.what();
    }
  }

  // The engine's own JSON is kept as it came: a draft count that is not a number is no figure, not a throw.
  r = rep, r["phases"][0]["engine"] = {{"draft_n", "many"}, {"draft_n_accepted", 3}};
  const RunRecord run = parseRun(dir, manifest, r.dump() + "\n", std::nullopt, std::nullopt);
  EXPECT_NO_THROW((void)toJson(buildReport(run)).dump());
  std::filesystem::remove_all(dir);
}

// The study's files as text, and the first results line as JSON, for the tests below to damage.
struct StudyFiles {
  std::string dir, manifest, results;
  nlohmann::json rep;
  explicit StudyFiles(const std::string& tag) : dir(tempDir(tag)) {
    writeStudyRun(dir);
    auto file = [&](const char* name) {
      std::ifstream f(dir + "/" + name);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    manifest = file("manifest.json");
    results = file("results.jsonl");
    rep = nlohmann::json::parse(results.substr(0, results.find('\n')));
  }
  ~StudyFiles() { std::filesystem::remove_all(dir); }
  // The error parseRun gives, or "" when it reads the files.
  std::string error(const std::string& m, const std::string& r) const {
    try {
      parseRun(dir, m, r, std::nullopt, std::nullopt);
    } catch (const RecordError& e) {
      return e.what();
    }
    return "";
  }
};

// A field whose minimum is 0 (a repetition, a GPU, a count) or the least of its type: one below is
// corrupt, the minimum itself is read (an off-by-one or a silent wrap would pass neither way).
TEST(ExperimentRecord, AnIntegerBelowItsMinimumIsCorruptAndTheMinimumIsRead) {
  const StudyFiles f("record_minimum");
  struct Case {
    std::vector<std::string> path;
    int64_t minimum;
    const char* key;
  };
  const Case cases[] = {{{"repetition"}, 0, "repetition"},
                        {{"attempt"}, 0, "attempt"},
                        {{"phases", "0", "tokens"}, 0, "tokens"},
                        {{"phases", "0", "steps"}, 0, "steps"},
                        {{"phases", "0", "gpus", "0", "gpu"}, 0, "gpu"},
                        {{"phases", "0", "gpus", "0", "samples"}, 0, "samples"}};
  for (const Case& c : cases) {
    for (int64_t v : {c.minimum, c.minimum - 1}) {
      nlohmann::json r = f.rep;
      nlohmann::json* at = &r;
      for (const std::string& k : c.path) at = k.size() == 1 && std::isdigit(k[0]) ? &(*at)[std::stoi(k)] : &(*at)[k];
      *at = v;
      const std::string e = f.error(f.manifest, r.dump() + "\n");
      if (v == c.minimum) {
        EXPECT_EQ(e, "") << c.key << " = " << v;
      } else {
        EXPECT_NE(e.find("results.jsonl:1: corrupt record"), std::string::npos) << e;
        EXPECT_NE(e.find(fmt::format("\"{}\" = {} is below this field's minimum of {}", c.key, v, c.minimum)),
                  std::string::npos)
            << e;
      }
    }
  }
  // An unsigned field: -1 would wrap to 4294967295.
  nlohmann::json r = f.rep;
  r["quiesce"]["other_pids"] = {0};
  EXPECT_EQ(f.error(f.manifest, r.dump() + "\n"), "");
  r["quiesce"]["other_pids"] = {-1};
  EXPECT_NE(f.error(f.manifest, r.dump() + "\n").find("\"other_pids\" = -1 is out of range for this field"),
            std::string::npos);
  // An int field at its least value and one below it.
  r = f.rep, r["phases"][0]["end_ns"] = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(f.error(f.manifest, r.dump() + "\n"), "");
  r = f.rep, r["phases"][0]["gpus"][0]["dmon_samples"] = int64_t{std::numeric_limits<int>::min()} - 1;
  EXPECT_NE(f.error(f.manifest, r.dump() + "\n").find("\"dmon_samples\" = -2147483649"), std::string::npos);
}

// acceptance is (0, 1] as the spec takes it: 1 exactly is read, anything past either end or not a
// number is corrupt.
TEST(ExperimentRecord, AcceptanceIsReadUpToItsBoundAndNoFurther) {
  const StudyFiles f("record_acceptance");
  for (const auto& [value, ok] : std::vector<std::pair<std::string, bool>>{{"1", true},
                                                                           {"1.0", true},
                                                                           {"0.0001", true},
                                                                           {"1.0000001", false},
                                                                           {"0", false},
                                                                           {"-0.5", false},
                                                                           {"nan", false},
                                                                           {"inf", false}}) {
    nlohmann::json m = nlohmann::json::parse(f.manifest);
    for (nlohmann::json& s : m["effective"][3]["settings"])
      if (s["key"] == "acceptance") s["value"] = value;
    const std::string e = f.error(m.dump(), f.results);
    if (ok)
      EXPECT_EQ(e, "") << value;
    else
      EXPECT_NE(e.find("arm C' has a acceptance that does not parse or is out of its range: \"" + value + "\""),
                std::string::npos)
          << value << ": " << e;
  }
}

// A free-form record (the meter's, an engine's) or a manifest field nested 100,000 or 1,000,000 deep:
// the reader crashed copying it (a stack overflow); now it is corrupt, with the file and the line.
TEST(ExperimentRecord, DeepJsonIsCorruptWithItsFileAndLine) {
  const StudyFiles f("record_deep");
  const std::string deep_object = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s + "1" + std::string(100000, '}');
  }();
  std::string line = f.rep.dump();
  line.replace(line.rfind('}'), 1, ",\"meter\":" + deep_object + "}");
  const std::string results = f.results + line + "\n";
  std::string e = f.error(f.manifest, results);
  EXPECT_NE(e.find("results.jsonl:13: corrupt record (line 1: arrays and objects nested deeper than 64 levels)"),
            std::string::npos)
      << e.substr(0, 300);
  nlohmann::json engine = f.rep;
  engine["phases"][0]["engine"] = "X";
  std::string eline = engine.dump();
  eline.replace(eline.find("\"X\""), 3, std::string(1000000, '[') + std::string(1000000, ']'));
  e = f.error(f.manifest, eline + "\n");
  EXPECT_NE(e.find("results.jsonl:1: corrupt record"), std::string::npos) << e.substr(0, 300);
  for (const char* field : {"versions", "topology", "machine", "invocation"}) {
    nlohmann::json m = nlohmann::json::parse(f.manifest);
    m[field] = "X";
    std::string text = m.dump(2);
    text.replace(text.find("\"X\""), 3, std::string(1000000, '[') + std::string(1000000, ']'));
    e = f.error(text, f.results);
    EXPECT_NE(e.find("manifest.json is not valid JSON (line "), std::string::npos) << field << ": " << e.substr(0, 300);
    EXPECT_NE(e.find("nested deeper than 64 levels"), std::string::npos) << field << ": " << e.substr(0, 300);
  }
}

// Arms and phases listed twice were read, and the report's work grew with the square of them
// (100,000 x "A" took 32 s and 3.5 GB): now refused at once, as the spec parser refuses them.
TEST(ExperimentRecord, NamesListedTwiceAreRefusedAtOnce) {
  const StudyFiles f("record_twice");
  auto withField = [&](const char* key, const nlohmann::json& v) {
    nlohmann::json m = nlohmann::json::parse(f.manifest);
    m[key] = v;
    return m.dump();
  };
  EXPECT_NE(f.error(withField("arms", {"A", "B", "A"}), f.results).find("manifest.json lists arm \"A\" twice"),
            std::string::npos);
  EXPECT_NE(f.error(withField("phases", {"prefill", "decode", "decode"}), f.results)
                .find("manifest.json lists phase \"decode\" twice"),
            std::string::npos);
  EXPECT_NE(f.error(withField("phases", {"prefill", "warmup"}), f.results)
                .find("manifest.json lists phase \"warmup\", which is not prefill or decode"),
            std::string::npos);
  nlohmann::json m = nlohmann::json::parse(f.manifest);
  m["effective"].push_back(m["effective"][0]);
  EXPECT_NE(f.error(m.dump(), f.results).find("manifest.json has the settings of arm \"A\" twice"), std::string::npos);
  m = nlohmann::json::parse(f.manifest);
  m["effective"][0]["settings"].push_back(m["effective"][0]["settings"][0]);
  const std::string key = m["effective"][0]["settings"][0]["key"];
  EXPECT_NE(f.error(m.dump(), f.results).find("manifest.json: arm A has setting \"" + key + "\" twice"),
            std::string::npos)
      << f.error(m.dump(), f.results);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = f.error(withField("arms", std::vector<std::string>(100000, "A")), f.results);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0 * kSlow);
  EXPECT_NE(e.find("lists 100000 arms, more than the 64 a spec may have"), std::string::npos) << e;
  std::vector<std::string> distinct;
  for (int i = 0; i < 65; ++i) distinct.push_back("arm" + std::to_string(i));
  EXPECT_NE(f.error(withField("arms", distinct), f.results).find("lists 65 arms"), std::string::npos);
  // In results.jsonl: an attempt recorded twice, a phase twice in one repetition.
  EXPECT_NE(f.error(f.manifest, f.results + f.rep.dump() + "\n")
                .find("results.jsonl:13: corrupt record (arm A repetition 1 attempt 1 is recorded twice (line 1 has "
                      "it too))"),
            std::string::npos)
      << f.error(f.manifest, f.results + f.rep.dump() + "\n");
  nlohmann::json r = f.rep;
  r["phases"].push_back(r["phases"][1]);
  EXPECT_NE(f.error(f.manifest, r.dump() + "\n").find("records phase \"decode\" twice"), std::string::npos);
  r = f.rep;
  for (int i = 0; i < 100000; ++i)
    r["phases"][0]["allreduce"].push_back({{"path", "p" + std::to_string(i)},
                                           {"calls", 1},
                                           {"payload_bytes", 1},
                                           {"tx_bytes", nlohmann::json::array()},
                                           {"rx_bytes", nlohmann::json::array()}});
  const std::string line = r.dump() + "\n";
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_NE(f.error(f.manifest, line).find("lists 100000 AllReduce paths, more than the 64"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0 * kSlow);
}

// A results.jsonl that is a folder, a link to /dev/zero or a FIFO rendered an all-N/A report (or read
// 23.8 GB, or blocked forever): each is a RecordError naming the file, at once. A file over its cap too.
TEST(ExperimentRecord, OnlyRegularFilesWithinTheirCapsAreRead) {
  const std::string dir = tempDir("record_files");
  writeStudyRun(dir);
  const std::string results = dir + "/results.jsonl";
  std::filesystem::rename(results, dir + "/kept.jsonl");
  const auto t0 = std::chrono::steady_clock::now();
  std::filesystem::create_directories(results);
  expectReadError(dir, results + " is not a regular file");
  std::filesystem::remove(results);
  std::filesystem::create_symlink("/dev/zero", results);
  expectReadError(dir, results + " is not a regular file");
  std::filesystem::remove(results);
  ASSERT_EQ(mkfifo(results.c_str(), 0600), 0);
  expectReadError(dir, results + " is not a regular file");
  std::filesystem::remove(results);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0 * kSlow);
  std::filesystem::rename(dir + "/kept.jsonl", results);
  std::filesystem::resize_file(dir + "/samples.jsonl", kMaxSamplesBytes + 1);  // sparse: costs no disk
  expectReadError(dir, dir + "/samples.jsonl is larger than the 4096 MiB tpscope reads of it");
  std::filesystem::remove(dir + "/samples.jsonl");
  std::filesystem::resize_file(results, kMaxResultsBytes + 1);
  expectReadError(dir, results + " is larger than the 1024 MiB tpscope reads of it");
  std::filesystem::remove_all(dir);
}

// A run stopped while writing a line leaves it without its newline: that line is left out with a note,
// the folder reads; a line cut anywhere else is corrupt.
TEST(ExperimentRecord, ALastLineCutOffIsLeftOutWithANote) {
  const StudyFiles f("record_cut");
  const std::string cut = f.rep.dump().substr(0, 100);
  const RunRecord run = parseRun(f.dir, f.manifest, f.results + cut, std::nullopt, std::nullopt);
  EXPECT_EQ(run.repetitions.size(), 12u);
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_EQ(run.notes[0], f.dir +
                              "/results.jsonl:13: the last line was cut off (the run stopped while writing it); "
                              "it is left out");
  EXPECT_NE(f.error(f.manifest, f.results + cut + "\n").find("results.jsonl:13: corrupt record"), std::string::npos);
  // Wherever the write stopped (in a key, a string, a number, between tokens), the same.
  const std::string whole = f.rep.dump();
  for (size_t at = 1; at < whole.size(); at += 7) {
    const RunRecord r = parseRun(f.dir, f.manifest, f.results + whole.substr(0, at), std::nullopt, std::nullopt);
    EXPECT_EQ(r.repetitions.size(), 12u) << at;
    EXPECT_EQ(r.notes.size(), 1u) << at << ": " << whole.substr(0, at);
  }
  // A last line without its newline that is whole is read; one that is wrong otherwise than cut short
  // (nested too deep) is corrupt, not taken for an interrupted write.
  EXPECT_EQ(parseRun(f.dir, f.manifest, f.rep.dump(), std::nullopt, std::nullopt).repetitions.size(), 1u);
  EXPECT_NE(f.error(f.manifest, f.results + std::string(100, '[') + std::string(100, ']'))
                .find("results.jsonl:13: corrupt record (line 1: arrays and objects nested deeper"),
            std::string::npos);
}

// A number too large for a double in a results line names its key.
TEST(ExperimentRecord, ANonFiniteNumberIsCorruptWithItsKey) {
  const StudyFiles f("record_inf");
  std::string line = f.rep.dump();
  const size_t at = line.find("\"tok_s\":");
  ASSERT_NE(at, std::string::npos);
  line.replace(at, line.find(',', at) - at, "\"tok_s\":1e999");
  EXPECT_NE(f.error(f.manifest, line + "\n")
                .find("results.jsonl:1: corrupt record (line 1: \"tok_s\" = 1e999 is "
                      "not a finite number)"),
            std::string::npos)
      << f.error(f.manifest, line + "\n");
}

TEST(ExperimentRecord, TheFolderParsesAsItsFilesDo) {
  const std::string dir = tempDir("record_parse");
  const RunRecord written = writeStudyRun(dir);
  auto file = [&](const char* name) {
    std::ifstream f(dir + "/" + name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const RunRecord parsed =
      parseRun(dir, file("manifest.json"), file("results.jsonl"), file("samples.jsonl"), std::nullopt);
  EXPECT_EQ(toJson(parsed.manifest), toJson(readRun(dir).manifest));
  EXPECT_EQ(parsed.repetitions.size(), written.repetitions.size());
  EXPECT_EQ(parsed.samples.size(), written.samples.size());
  try {
    parseRun(dir, file("manifest.json"), std::string("{}\n\n{\"arm\""), std::nullopt, std::nullopt);
    FAIL() << "a corrupt line was read";
  } catch (const RecordError& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/results.jsonl:1: corrupt record"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(ExperimentRecord, TrafficFromMeterWindow) {
  MeterGpu g0, g1;
  g0.index = 2;
  g1.index = 5;
  g0.pcie_ceiling_mbps = g1.pcie_ceiling_mbps = 63015;
  MeterWindow w;
  w.name = "decode";
  w.cells.resize(2);
  MeterCell& rx = w.cells[1][static_cast<int>(MeterCounter::kPcieRx)];
  rx.bytes = 4e6;
  rx.mean_mbps = 2.0;
  rx.samples = 900;
  MeterFigure dmon;
  dmon.mean_mbps = 1.5;
  dmon.samples = 90;
  rx.beside.push_back({"dmon", dmon, std::nullopt});
  w.cells[1][static_cast<int>(MeterCounter::kNvlinkTx)].mean_mbps = 77;
  const auto t = trafficFromWindow(w, {g0, g1});
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].gpu, 2);
  EXPECT_FALSE(t[0].rx_mbps);
  EXPECT_EQ(t[1].gpu, 5);
  EXPECT_DOUBLE_EQ(*t[1].rx_mbps, 2.0);
  EXPECT_EQ(t[1].samples, 900);
  EXPECT_DOUBLE_EQ(*t[1].dmon_rx_mbps, 1.5);
  EXPECT_DOUBLE_EQ(*t[1].nvlink_tx_mbps, 77);
  EXPECT_DOUBLE_EQ(*t[1].ceiling_mbps, 63015);
}

TEST(ExperimentRecord, RowsFromSamplesMapGpuAndMidpoint) {
  MeterGpu g;
  g.index = 3;
  MeterSample s;
  s.gpu = 0;
  s.t_before_ns = 100;
  s.t_after_ns = 300;
  s.bytes[static_cast<int>(MeterCounter::kPcieRx)] = 42;
  const auto rows = rowsFromSamples("C", 1, {s}, {g});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].gpu, 3);
  EXPECT_EQ(rows[0].t_ns, 200);
  EXPECT_EQ(*rows[0].pcie_rx_bytes, 42u);
  EXPECT_FALSE(rows[0].nvlink_rx_bytes);
}

// The rows keep each value's own read time (NVML stamps the fields of one call apart), so a window
// recomputed from samples.jsonl equals the meter's: with only the reads' midpoints it would not.
TEST(ExperimentRecord, WindowsRecomputeFromTheRowsExactly) {
  MeterGpu g;
  g.index = 1;
  g.supported[static_cast<int>(MeterCounter::kPcieRx)] = g.supported[static_cast<int>(MeterCounter::kPcieTx)] = true;
  detail::Series series;
  const int rx = static_cast<int>(MeterCounter::kPcieRx), tx = static_cast<int>(MeterCounter::kPcieTx);
  for (int i = 0; i < 20; ++i) {
    MeterSample s;
    s.t_before_ns = 1'000'000LL * i, s.t_after_ns = s.t_before_ns + 600'000;
    s.t_ns[rx] = s.t_before_ns + 50'000, s.t_ns[tx] = s.t_before_ns + 550'000;  // far from the midpoint
    s.bytes[rx] = uint64_t(i) * i * 1000;  // a rising rate: proration depends on the read times
    s.bytes[tx] = uint64_t(i) * 7000;
    series.push_back(s);
  }
  RunRecord run;
  run.samples = rowsFromSamples("A", 0, series, {g});
  for (const auto& [start, end] : {std::pair<int64_t, int64_t>{2'300'000, 9'700'000}, {5'010'000, 5'020'000}})
    for (MeterCounter c : {MeterCounter::kPcieRx, MeterCounter::kPcieTx}) {
      const MeterCell cell = detail::computeCell(series, c, start, end, 10, std::nullopt);
      const std::optional<double> again = windowBytesFromSamples(run, "A", 0, 1, c, start, end);
      ASSERT_TRUE(cell.bytes && again);
      EXPECT_DOUBLE_EQ(*again, *cell.bytes) << meterCounterName(c) << " [" << start << ", " << end << "]";
    }
  // The rows survive the JSON round trip with their times.
  const SampleRow back = sampleFromJson(toJson(run.samples[3]));
  EXPECT_EQ(back.pcie_rx_t_ns, series[3].t_ns[rx]);
  EXPECT_EQ(back.pcie_tx_t_ns, series[3].t_ns[tx]);
  EXPECT_FALSE(back.nvlink_rx_t_ns);
}

TEST(ExperimentRecord, PhaseResultFromOutcome) {
  PhaseOutcome o;
  o.phase = "decode";
  o.start_ns = 1'000'000'000;
  o.end_ns = 3'000'000'000;
  o.tokens = 100;
  o.steps = 40;
  o.output = {1.5f, -0.25f};
  const PhaseResult p = makePhaseResult(o, {});
  EXPECT_DOUBLE_EQ(p.tok_s, 50);
  EXPECT_DOUBLE_EQ(p.step_ms, 50);
  EXPECT_EQ(p.output, o.output);
}

// A decode's output travels as bfloat16 bit patterns: the workload's bfloat16 values exactly, other floats
// rounded to the nearest; a phase without one has no such key; a pattern that is not 16 bits is corrupt.
TEST(ExperimentRecord, DecodeOutputRoundTripsAsBfloat16) {
  RepetitionResult r;
  r.arm = "int8";
  PhaseResult p;
  p.phase = "decode";
  p.output = {1.0f, -0.1220703125f, 3.0e38f, 0.0f, -0.0f, 1.00390625f, 1.01171875f};
  r.phases.push_back(p);
  PhaseResult prefill;
  prefill.phase = "prefill";
  r.phases.insert(r.phases.begin(), prefill);
  const nlohmann::json j = toJson(r);
  EXPECT_FALSE(j["phases"][0].contains("output_bf16"));
  // 1 + 2^-8 and 1 + 3 x 2^-8 lie halfway between two bfloat16 values: ties to even, 1 and 1 + 2^-6.
  EXPECT_EQ(j["phases"][1]["output_bf16"], nlohmann::json({0x3F80, 0xBDFA, 0x7F62, 0x0000, 0x8000, 0x3F80, 0x3F82}));
  const RepetitionResult back = repetitionFromJson(j);
  EXPECT_TRUE(back.phases[0].output.empty());
  ASSERT_EQ(back.phases[1].output.size(), 7u);
  EXPECT_EQ(back.phases[1].output[0], 1.0f);
  EXPECT_EQ(back.phases[1].output[1], -0.1220703125f);
  EXPECT_EQ(back.phases[1].output[5], 1.0f);
  EXPECT_EQ(back.phases[1].output[6], 1.015625f);
  EXPECT_EQ(toJson(back), j);
  nlohmann::json bad = j;
  bad["phases"][1]["output_bf16"][2] = 70000;
  EXPECT_THROW(repetitionFromJson(bad), nlohmann::json::exception);
  bad["phases"][1]["output_bf16"] = "0x3F80";
  EXPECT_THROW(repetitionFromJson(bad), nlohmann::json::exception);
}

}  // namespace
}  // namespace tpscope::experiment
