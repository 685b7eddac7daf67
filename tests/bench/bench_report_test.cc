// commx-bench writers: JSON parses back (python3's json module), the SVG is well-formed XML with
// one line per backend, and the text rows keep the nccl-tests columns. Layer: tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "report.h"
#include "tune.h"

using namespace commx;
using namespace commx::bench;

namespace {

std::vector<Row> sample_rows() {
  std::vector<Row> rows;
  for (const char* b : {"cpu", "gloo \"quoted\" <x>"})
    for (uint64_t s : {8ull, 1024ull, 1048576ull}) {
      Row r;
      r.collective = "all_reduce";
      r.backend = b;
      r.world_size = 2;
      r.dtype = "float32";
      r.op = "sum";
      r.size = s;
      r.count = s / 4;
      r.time_us = 1.5 + s / 1000.0;
      r.mean_us = r.time_us * 1.1;
      r.min_us = r.time_us * 0.9;
      r.max_us = r.time_us * 1.5;
      r.algbw = s / (r.time_us * 1e3);
      r.busbw = r.algbw;
      r.wrong = 0;
      r.in_place = true;
      rows.push_back(r);
    }
  return rows;
}

MachineInfo machine() {
  MachineInfo m = collect_machine_info("commx-bench all_reduce --np 2 \"x\"", 2, {"cpu", "gloo"});
  EXPECT_GT(m.cores, 0);
  EXPECT_FALSE(m.date.empty());
  return m;
}

// Runs python3 on `file`; returns its exit status.
int python_check(const std::string& code, const std::string& file) {
  std::string cmd = "python3 -c '" + code + "' " + file;
  return std::system(cmd.c_str());
}

TEST(BenchReport, JsonParsesBack) {
  std::string path = ::testing::TempDir() + "/bench_report_test.json";
  std::ofstream(path) << to_json(machine(), sample_rows());
  const char* code =
      "import json,sys; d=json.load(open(sys.argv[1])); h=d[\"header\"]; r=d[\"rows\"];"
      "assert h[\"cores\"]>0 and h[\"world_size\"]==2 and \"hostname\" in h and \"gpus\" in h;"
      "assert len(r)==6 and r[3][\"backend\"]==\"gloo \\\"quoted\\\" <x>\";"
      "keys={\"collective\",\"backend\",\"world_size\",\"dtype\",\"op\",\"size\",\"count\","
      "\"time_us\",\"algbw\",\"busbw\",\"wrong\",\"in_place\",\"graph\",\"root\","
      "\"min_us\",\"max_us\"};"
      "assert all(keys <= set(x) for x in r);"
      "assert all(x[\"min_us\"] < x[\"time_us\"] < x[\"max_us\"] for x in r)";
  EXPECT_EQ(python_check(code, path), 0);
}

TEST(BenchReport, SvgIsWellFormed) {
  std::string path = ::testing::TempDir() + "/bench_report_test.svg";
  std::string svg = to_svg(machine(), sample_rows());
  std::ofstream(path) << svg;
  const char* code =
      "import sys,xml.etree.ElementTree as E; t=E.parse(sys.argv[1]).getroot();"
      "ns=\"{http://www.w3.org/2000/svg}\"; assert t.tag==ns+\"svg\";"
      "paths=t.findall(ns+\"path\");"
      "bands=[p for p in paths if p.get(\"class\")==\"spread\"];"
      "assert len(paths)-len(bands)==4 and len(bands)==4, len(paths);"
      "import re; ticks=[x.text for x in t.iter(ns+\"text\") if x.get(\"font-size\")==\"11\""
      " and x.get(\"text-anchor\") in (\"end\",\"middle\")];"
      "vals=[x for x in ticks if re.fullmatch(r\"[0-9.]+[kMGT]?\",x)];"
      "sizes=[x for x in ticks if re.fullmatch(r\"[0-9]+[BKMG]\",x)];"
      "assert set(vals)>={\"1\",\"10\",\"100\",\"1k\"}, ticks;"
      "assert {\"8B\",\"2K\",\"512K\"}<=set(sizes), ticks;"
      "assert not [x for x in ticks if \"e\" in x], ticks";
  EXPECT_EQ(python_check(code, path), 0);
  EXPECT_NE(svg.find("fill='white'"), std::string::npos);
  EXPECT_NE(svg.find("busbw"), std::string::npos);
}

// The band of one series lies around its median line: max above, min below, in SVG y (down).
TEST(BenchReport, SvgBandBracketsTheMedian) {
  auto rows = sample_rows();
  rows.resize(3);  // one backend
  std::string svg = to_svg(machine(), rows);
  auto coords = [](const std::string& d) {
    std::vector<std::pair<double, double>> pts;
    std::istringstream in(d);
    std::string tok;
    while (in >> tok) {
      if (tok == "Z") break;
      tok = tok.substr(1);  // M or L
      auto comma = tok.find(',');
      pts.emplace_back(std::stod(tok.substr(0, comma)), std::stod(tok.substr(comma + 1)));
    }
    return pts;
  };
  size_t band_at = svg.find("class='spread' d='");
  ASSERT_NE(band_at, std::string::npos);
  band_at += 18;
  auto band = coords(svg.substr(band_at, svg.find('\'', band_at) - band_at));
  size_t line_at = svg.find("<path d='", band_at);
  ASSERT_NE(line_at, std::string::npos);
  line_at += 9;
  auto line = coords(svg.substr(line_at, svg.find('\'', line_at) - line_at));
  ASSERT_EQ(line.size(), 3u);
  ASSERT_EQ(band.size(), 6u);
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_DOUBLE_EQ(band[j].first, line[j].first);
    EXPECT_DOUBLE_EQ(band[5 - j].first, line[j].first);
    EXPECT_LT(band[j].second, line[j].second);      // max time: higher on the page
    EXPECT_GT(band[5 - j].second, line[j].second);  // min time: lower
  }
}

TEST(BenchReport, TextRows) {
  auto rows = sample_rows();
  std::ostringstream os;
  print_header(os, true);
  rows[3].ratio = 2.5;
  print_row(os, nullptr, &rows[3], true);
  std::string s = os.str();
  for (const char* col :
       {"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "ratio"})
    EXPECT_NE(s.find(col), std::string::npos) << col;
  EXPECT_NE(s.find("N/A"), std::string::npos);
  EXPECT_NE(s.find("2.50x"), std::string::npos);
}

TEST(BenchReport, Markdown) {
  auto rows = sample_rows();
  rows[4].ratio = 2.0;
  std::string md = to_markdown(machine(), rows);
  EXPECT_NE(md.find("Command: `commx-bench all_reduce --np 2"), std::string::npos) << md;
  EXPECT_NE(md.find("### all_reduce float32 sum in-place"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1024 |"), std::string::npos) << md;
  EXPECT_NE(md.find("2.00x"), std::string::npos) << md;
  EXPECT_NE(md.find("cpu min-max (us)"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2.27-3.79 |"), std::string::npos) << md;  // 1024 B: 2.524 x 0.9, x 1.5
  // header, separator and 3 sizes
  size_t table_lines = 0;
  for (size_t p = md.find("| size"); p != std::string::npos && p < md.size();
       p = md.find('\n', p) + 1) {
    if (md[p] != '|') break;
    ++table_lines;
  }
  EXPECT_EQ(table_lines, 5u) << md;
}

// A checked in-place all_reduce row of `backend` at `world` ranks over `link`.
Row tune_row(const char* backend, int world, const char* link, uint64_t size, double time_us) {
  Row r;
  r.collective = "all_reduce";
  r.backend = backend;
  r.world_size = world;
  r.link = link;
  r.dtype = "float32";
  r.op = "sum";
  r.size = size;
  r.time_us = time_us;
  r.wrong = 0;
  r.in_place = true;
  return r;
}

TEST(BenchTune, WinnersBecomeRanges) {
  std::vector<Row> rows;
  auto add = [&](const char* b, uint64_t size, double t) { rows.push_back(tune_row(b, 4, "any", size, t)); };
  add("cpu:flat", 8, 1), add("cpu:ring", 8, 2);
  add("cpu:flat", 1024, 3), add("cpu:ring", 1024, 4);
  add("cpu:flat", 65536, 30), add("cpu:ring", 65536, 20);
  add("gloo", 65536, 1);  // other backends never win a cpu table
  TuningTable t = tuning_from_rows(rows, "cpu");
  ASSERT_EQ(t.entries().size(), 2u);
  EXPECT_EQ(t.lookup("all_reduce", 4, 0), "flat");
  EXPECT_EQ(t.lookup("all_reduce", 4, 1024), "flat");
  EXPECT_EQ(t.lookup("all_reduce", 4, 1025), "ring");
  EXPECT_EQ(t.lookup("all_reduce", 4, 1ull << 40), "ring");
  // The text form reads back to the same table.
  TuningTable back = TuningTable::parse(t.to_text());
  EXPECT_EQ(back.to_text(), t.to_text());
}

TEST(BenchTune, EntriesCarryTheLinkAndMergeByWorldAndLink) {
  auto row = tune_row;
  TuningTable shm2 = tuning_from_rows({row("cpu:flat", 2, "shm", 8, 1), row("cpu:ring", 2, "shm", 8, 2)}, "cpu");
  ASSERT_EQ(shm2.entries().size(), 1u);
  EXPECT_EQ(shm2.entries()[0].link, "shm");
  EXPECT_EQ(shm2.lookup("all_reduce", 2, 8, "shm"), "flat");
  EXPECT_EQ(shm2.lookup("all_reduce", 2, 8, "tcp"), "");  // measured on shm only
  // A tcp run and a 4-rank run join the file; a new shm run at 2 ranks replaces the old rows.
  TuningTable tcp2 = tuning_from_rows({row("cpu:flat", 2, "tcp", 8, 5), row("cpu:ring", 2, "tcp", 8, 3)}, "cpu");
  TuningTable shm4 = tuning_from_rows({row("cpu:flat", 4, "shm", 8, 9), row("cpu:ring", 4, "shm", 8, 7)}, "cpu");
  TuningTable file = merge_tuning(merge_tuning(shm2, tcp2), shm4);
  EXPECT_EQ(file.entries().size(), 3u);
  EXPECT_EQ(file.lookup("all_reduce", 2, 8, "shm"), "flat");
  EXPECT_EQ(file.lookup("all_reduce", 2, 8, "tcp"), "ring");
  EXPECT_EQ(file.lookup("all_reduce", 4, 8, "shm"), "ring");
  TuningTable again = tuning_from_rows({row("cpu:flat", 2, "shm", 8, 4), row("cpu:ring", 2, "shm", 8, 2)}, "cpu");
  file = merge_tuning(file, again);
  EXPECT_EQ(file.entries().size(), 3u);
  EXPECT_EQ(file.lookup("all_reduce", 2, 8, "shm"), "ring");
  EXPECT_EQ(file.lookup("all_reduce", 2, 8, "tcp"), "ring");
  EXPECT_EQ(file.lookup("all_reduce", 4, 8, "shm"), "ring");
}

}  // namespace
