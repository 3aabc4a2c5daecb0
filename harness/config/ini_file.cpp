#include "harness/config/ini_file.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

namespace {

// Inline comments: ' #' or ' ;' after a value or a section header.
std::string without_inline_comment(std::string text) {
  for (const char* marker : {" #", " ;", "\t#", "\t;"}) {
    const size_t c = text.find(marker);
    if (c != std::string::npos) text = trim(text.substr(0, c));
  }
  return text;
}

// A line as an error quotes it: its first 120 bytes, control bytes as \xHH (a binary file, or one with CR line ends,
// is one long line that would otherwise be echoed whole).
std::string quoted_line(const std::string& line) {
  constexpr size_t kShown = 120;
  std::string out;
  for (size_t i = 0; i < line.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += line[i];
    }
  }
  if (line.size() > kShown) out += "... (" + std::to_string(line.size()) + " bytes)";
  return out;
}

// A UTF-8 byte order mark, which some editors write first: not part of the first line.
std::string without_byte_order_mark(const std::string& text) {
  return text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text;
}

}  // namespace

std::vector<IniEntry> parse_ini_text(const std::string& text, const std::string& file_name,
                                     std::vector<IniEntry>* sections) {
  std::vector<IniEntry> entries;
  std::map<std::string, int> seen;
  std::istringstream in(without_byte_order_mark(text));
  std::string raw, section;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      const std::string header = without_inline_comment(line);
      if (header.back() != ']' || header.size() < 3)
        fail(file_name, ":", line_no, ": malformed section header '", quoted_line(line), "'");
      section = trim(header.substr(1, header.size() - 2));
      if (sections) sections->push_back({section, "", file_name, line_no});
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos)
      fail(file_name, ":", line_no, ": expected 'key = value', got '", quoted_line(line), "'");
    std::string key = trim(line.substr(0, eq));
    const std::string value = without_inline_comment(trim(line.substr(eq + 1)));
    if (key.empty()) fail(file_name, ":", line_no, ": empty key in '", quoted_line(line), "'");
    if (!section.empty()) key = section + "." + key;
    const auto [it, inserted] = seen.emplace(key, line_no);
    if (!inserted) fail(file_name, ":", line_no, ": key '", key, "' is already set on line ", it->second);
    entries.push_back({key, value, file_name, line_no});
  }
  return entries;
}

std::vector<IniEntry> read_ini_file(const std::string& path, std::vector<IniEntry>* sections) {
  return parse_ini_text(read_text_file(path, "config file"), path, sections);
}

}  // namespace specula
