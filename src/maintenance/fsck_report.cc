// Text and JSON renderings of an fsck report; see fsck_report.h.
#include "maintenance/fsck_report.h"

namespace ckptfs {

int FsckExitCode(const FsckReport& report) {
  if (report.findings.empty()) return kFsckClean;
  return report.remaining() == 0 ? kFsckAllRepaired : kFsckProblemsLeft;
}

std::string RenderFsckFinding(const FsckFinding& f) {
  std::string line = std::string(FsckSeverityName(f.severity)) + ": " + f.path + ": " + f.problem;
  if (f.repaired) return line + " (repaired: " + f.repair + ")";
  if (!f.repair.empty()) return line + " (--repair: " + f.repair + ")";
  if (!f.advice.empty()) return line + " (" + f.advice + ")";
  return line;
}

std::string RenderFsckText(const FsckReport& report) {
  std::string out;
  for (const FsckFinding& f : report.findings) out += RenderFsckFinding(f) + "\n";
  const FsckCounts& c = report.counts;
  if (c.crc_files > 0) {
    out += "fsck: CRC32C recomputed for " + std::to_string(c.crc_files) + " committed files (" +
           std::to_string(c.crc_bytes) + " bytes)\n";
  }
  if (c.remote_crc_files > 0) {
    out += "fsck: CRC32C checked for " + std::to_string(c.remote_crc_files) + " remote objects (" +
           std::to_string(c.remote_crc_bytes) + " bytes)\n";
  }
  if (!report.repair_blocked.empty()) out += "fsck: --repair withheld: " + report.repair_blocked + "\n";
  out += "fsck: " + std::to_string(c.files) + " files, " + std::to_string(c.steps) + " steps checked; " +
         std::to_string(report.errors()) + " errors, " + std::to_string(report.warnings()) + " warnings, " +
         std::to_string(report.repaired()) + " repaired\n";
  return out;
}

nlohmann::json FsckReportJson(const FsckReport& report) {
  const FsckCounts& c = report.counts;
  nlohmann::json findings = nlohmann::json::array();
  for (const FsckFinding& f : report.findings) {
    findings.push_back({{"severity", FsckSeverityName(f.severity)},
                        {"check", f.check},
                        {"path", f.path},
                        {"ino", f.ino},
                        {"problem", f.problem},
                        {"advice", f.advice},
                        {"repair", f.repair},
                        {"repaired", f.repaired}});
  }
  return {{"counts",
           {{"inodes", c.inodes},
            {"directories", c.directories},
            {"files", c.files},
            {"symlinks", c.symlinks},
            {"steps", c.steps},
            {"committed_steps", c.committed_steps},
            {"backing_files", c.backing_files},
            {"crc_files", c.crc_files},
            {"crc_bytes", c.crc_bytes},
            {"remote_crc_files", c.remote_crc_files},
            {"remote_crc_bytes", c.remote_crc_bytes}}},
          {"errors", report.errors()},
          {"warnings", report.warnings()},
          {"repaired", report.repaired()},
          {"remaining", report.remaining()},
          {"repair_blocked",
           report.repair_blocked.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.repair_blocked)},
          {"findings", std::move(findings)},
          {"exit_code", FsckExitCode(report)}};
}

}  // namespace ckptfs
