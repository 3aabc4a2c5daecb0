// Options of a drafter spec, "kind:key=value,key=value" (e.g. prompt-lookup:max_n=3,min_n=1,
// synthetic:alpha=0.7). Errors name the whole spec and the offending entry, so the user can fix the flag.
#pragma once

#include <map>
#include <set>
#include <string>

namespace specula {

// "a=1,b=2" -> {a: 1, b: 2}. Empty text -> {}. Throws Error on an entry without '=', an empty key or value,
// a key not in `known`, or a key given twice.
std::map<std::string, std::string> parse_drafter_options(const std::string& text, const std::string& spec,
                                                         const std::set<std::string>& known);

// A whole integer / a finite real number; throws Error naming the spec and key otherwise.
long drafter_option_int(const std::string& value, const std::string& key, const std::string& spec);
double drafter_option_real(const std::string& value, const std::string& key, const std::string& spec);

}  // namespace specula
