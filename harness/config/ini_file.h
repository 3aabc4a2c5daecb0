// A small INI reader that remembers where every value came from, so configuration errors can name the
// file, the line and the key. Syntax: `[section]`, `key = value`, comments starting with '#' or ';', on a line of
// their own or after a value or a header (` #` or ` ;`, a space or tab before). Keys inside a section are reported
// as "section.key".
#pragma once

#include <string>
#include <vector>

namespace specula {

struct IniEntry {
  std::string key;    // "section.key", or "key" before any section
  std::string value;  // trimmed
  std::string file;
  int line = 0;
  std::string where() const { return file + ":" + std::to_string(line); }
};

// Reads and parses `path`; throws Error naming the file and line of a syntax error, a duplicate key, or
// the file itself when it cannot be read.
// `sections`, where given, receives the section headers in order, each as an IniEntry whose key is the section's name
// (value empty), so that a reader can refuse a section it does not know even where no key follows it (a misspelt
// `[samplng]` left empty).
std::vector<IniEntry> read_ini_file(const std::string& path, std::vector<IniEntry>* sections = nullptr);
std::vector<IniEntry> parse_ini_text(const std::string& text, const std::string& file_name,
                                     std::vector<IniEntry>* sections = nullptr);

// `s` without leading and trailing spaces, tabs and carriage returns.
std::string trim(const std::string& s);

}  // namespace specula
