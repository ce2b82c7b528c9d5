#include "server/daemon/systemd.h"

#include <spdlog/sinks/base_sink.h>
#include <sys/stat.h>
#include <syslog.h>
#include <systemd/sd-daemon.h>
// Our own fields instead of CODE_FILE/CODE_LINE of this sink (which says nothing).
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>
#include <sys/uio.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/log.h"

namespace rgpu::server {
namespace {

int syslogPriority(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return LOG_DEBUG;
    case spdlog::level::info: return LOG_INFO;
    case spdlog::level::warn: return LOG_WARNING;
    case spdlog::level::err: return LOG_ERR;
    default: return LOG_CRIT;
  }
}

// One journal entry per log line, with rgpu's fields.
class JournalSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  JournalSink(const std::string& component, uint64_t session)
      : component_("RGPU_COMPONENT=" + component),
        session_(session ? "RGPU_SESSION=" + std::to_string(session) : "") {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    // Escaped as on stderr: a peer's text never forges an entry or a field.
    const std::string message =
        "MESSAGE=" + common::escapeControl(std::string_view(msg.payload.data(), msg.payload.size()));
    const std::string priority = "PRIORITY=" + std::to_string(syslogPriority(msg.level));
    static const std::string identifier = "SYSLOG_IDENTIFIER=rgpu-server";
    std::vector<iovec> v;
    for (const std::string* f : {&message, &priority, &identifier, &component_, &session_})
      if (!f->empty()) v.push_back({const_cast<char*>(f->data()), f->size()});
    sd_journal_sendv(v.data(), static_cast<int>(v.size()));
  }
  void flush_() override {}

 private:
  const std::string component_, session_;
};

}  // namespace

bool stderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (!stream || !*stream) return false;
  struct stat st {};
  if (::fstat(2, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(stream, "%llu:%llu", &dev, &ino) != 2) return false;
  return dev == static_cast<unsigned long long>(st.st_dev) && ino == static_cast<unsigned long long>(st.st_ino);
}

void logToJournal(const std::string& component, uint64_t session) {
  auto& l = common::logger();
  l.sinks().clear();
  l.sinks().push_back(std::make_shared<JournalSink>(component, session));
}

void notifySystemd(const std::string& state) { sd_notify(0, state.c_str()); }

}  // namespace rgpu::server
