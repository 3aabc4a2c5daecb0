// Writing results so that nothing is lost silently: every write is flushed and checked, and a failure (a full
// disk, a file-size limit, /dev/full) is an Error naming the file. Whole files are written to a temporary
// beside the target and renamed over it, so a reader never sees half a file and an old file survives a
// failed write. Targets that are not regular files (a terminal, a pipe, /dev/full) are written in place:
// renaming over a device would replace it.
#pragma once

#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace specula {

// Writes `content` to `path` (see above). `what` names the output in errors, e.g. "--output".
void write_output_file(const std::string& path, const std::string& content, const std::string& what);

// Replaces the regular file `path` in one rename: `write(temporary)` fills a temporary beside it (named for this
// process), which then takes its place. A failed write or rename removes the temporary and leaves the old file;
// `what` names the file in errors. write_output_file and the weight writers (checkpoints, safetensors) use it.
void replace_file_atomically(const std::string& path, const std::string& what,
                             const std::function<void(const std::string& temporary)>& write);

// Before any expensive work: whether write_output_file can write `path` later. A regular file or a missing one
// needs a folder that takes a new file (tried by creating and removing one there: permission bits say nothing for
// root or on /proc); a folder is refused; a device or pipe is written in place and not tried. An Error naming
// `what` and the path when it cannot. `folder_created`: the writer creates a missing folder first
// (create_parent_folder), so a missing one is checked as check_output_folder_writable checks it.
void check_output_file_writable(const std::string& path, const std::string& what, bool folder_created = false);

// Before any expensive work: whether the folder `path` (written into later, created then if missing) can be: an
// existing folder must take a new file, a missing one must have a nearest existing ancestor that is a folder and
// takes one. An Error naming `what` and the path when it cannot.
void check_output_folder_writable(const std::string& path, const std::string& what);

// Before any expensive work, for a command that writes a model (a checkpoint, heads) into the folder `path`: refuses a
// folder that already holds one (its config.json) unless `overwrite`, and, whatever `overwrite` says, the folder of
// `source`, the model the command reads (a typo there would destroy what it trains on). Then as
// check_output_folder_writable. Errors name `what`.
void check_model_output_folder(const std::string& path, bool overwrite, const std::string& source,
                               const std::string& what);

// Creates the folder `path` will be written in (reports whose default path is under results/), if it is
// missing; an Error naming `what` and the folder when it cannot.
void create_parent_folder(const std::string& path, const std::string& what);

// A command's outputs and inputs, each as (option, path): refuses two outputs that are one file (the second written
// would replace the first) and an output that is an input (read, then written over), naming both options. Paths are
// compared once resolved (symbolic links, "..", a relative path against the absolute one), and files that exist by
// what they are (hard links). Paths under /dev/ are left out as written (/dev/null twice is fine); /dev/stdout resolves
// to what standard output is, so two outputs to it are one file where that is a regular file, as they are.
void check_distinct_files(const std::vector<std::pair<std::string, std::string>>& outputs,
                          const std::vector<std::pair<std::string, std::string>>& inputs);

// An output appended to as work goes on (records.jsonl): each append() writes whole lines and flushes them,
// so an interruption leaves complete lines; a failed write is an Error naming the file.
class AppendedOutput {
 public:
  AppendedOutput(const std::string& path, const std::string& what);
  void append(const std::string& lines);

 private:
  std::string path_, what_;
  std::ofstream out_;
};

// Flushes standard output; an Error when anything written to it was lost.
void check_standard_output();

}  // namespace specula
