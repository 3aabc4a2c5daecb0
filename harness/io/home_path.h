// A leading `~` in a path written in a file. The shell expands `~/runs` on a command line; an experiment file's
// `output_dir = ~/runs` reaches the program as written, and without this it would make a folder named `~` in the
// working folder.
#pragma once

#include <string>

namespace specula {

// `~` or `~/REST` as $HOME or $HOME/REST; any other path as given (`~user/` is not expanded: the shell's rule for
// another user's home needs the password database, and a path written that way is rare in an experiment file). An
// Error naming the path where it starts with `~` and HOME is unset or empty.
std::string expand_home(const std::string& path);

// A model or drafter spec `KIND:ITEM,ITEM...` with each item's leading `~` expanded as expand_home does, and each
// KEY=VALUE item's value's (medusa:~/heads,tree=~/tree.txt); a spec with no `:` (a kind without a path) as given.
std::string expand_home_in_spec(const std::string& spec);

}  // namespace specula
