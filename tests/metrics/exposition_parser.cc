#include "exposition_parser.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>
#include <stdexcept>
#include <string_view>

namespace sluice::metrics_test {
namespace {

[[noreturn]] void fail(size_t line_no, const std::string& line, const std::string& why) {
  throw std::runtime_error("exposition line " + std::to_string(line_no) + ": " + why + ": [" +
                           line + "]");
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates, beyond U+10FFFF.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += n;
  }
  return true;
}

bool is_metric_name(std::string_view s) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s.begin(), s.end(), re);
}

bool is_label_name(std::string_view s) {
  static const std::regex re("[a-zA-Z_][a-zA-Z0-9_]*");
  return std::regex_match(s.begin(), s.end(), re) && s.rfind("__", 0) != 0;
}

bool parse_float(std::string_view s, double* out) {
  if (s == "NaN") {
    *out = std::nan("");
    return true;
  }
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  static const std::regex re(R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?)");
  if (!std::regex_match(s.begin(), s.end(), re)) return false;
  *out = std::strtod(std::string(s).c_str(), nullptr);
  return true;
}

// Reads `name{labels} value [timestamp]` from `line`.
Sample parse_sample(size_t no, const std::string& line) {
  Sample s;
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  if (!is_metric_name(s.name)) fail(no, line, "bad metric name '" + s.name + "'");
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      if (i >= line.size()) fail(no, line, "unterminated label set");
      if (line[i] == '}') {
        ++i;
        break;
      }
      size_t eq = line.find('=', i);
      if (eq == std::string::npos) fail(no, line, "label without '='");
      const std::string key = line.substr(i, eq - i);
      if (!is_label_name(key)) fail(no, line, "bad label name '" + key + "'");
      i = eq + 1;
      if (i >= line.size() || line[i] != '"') fail(no, line, "label value not quoted");
      ++i;
      std::string value;
      for (;;) {
        if (i >= line.size()) fail(no, line, "unterminated label value");
        const char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) fail(no, line, "escape at the end of the line");
          const char e = line[i++];
          if (e == '\\') {
            value += '\\';
          } else if (e == '"') {
            value += '"';
          } else if (e == 'n') {
            value += '\n';
          } else {
            fail(no, line, std::string("unknown escape \\") + e);
          }
          continue;
        }
        value += c;
      }
      if (!s.labels.emplace(key, value).second) fail(no, line, "label '" + key + "' repeated");
      if (i < line.size() && line[i] == ',') {
        ++i;
      } else if (i >= line.size() || line[i] != '}') {
        fail(no, line, "expected ',' or '}' after a label");
      }
    }
  }
  if (i >= line.size() || line[i] != ' ') fail(no, line, "expected one space before the value");
  ++i;
  const std::string rest = line.substr(i);
  const size_t sp = rest.find(' ');
  const std::string value_text = rest.substr(0, sp);
  if (!parse_float(value_text, &s.value)) fail(no, line, "bad value '" + value_text + "'");
  if (sp != std::string::npos) {
    static const std::regex ts("-?[0-9]+");
    const std::string stamp = rest.substr(sp + 1);
    if (!std::regex_match(stamp, ts)) fail(no, line, "bad timestamp '" + stamp + "'");
  }
  return s;
}

std::string unescape_help(size_t no, const std::string& line, std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i >= text.size()) fail(no, line, "HELP ends in a backslash");
    if (text[i] == '\\') {
      out += '\\';
    } else if (text[i] == 'n') {
      out += '\n';
    } else {
      fail(no, line, std::string("unknown escape \\") + text[i] + " in HELP");
    }
  }
  return out;
}

}  // namespace

std::vector<Sample> Exposition::find(const std::string& name,
                                     const std::map<std::string, std::string>& match) const {
  std::vector<Sample> out;
  auto it = families.find(name);
  if (it == families.end()) return out;
  for (const Sample& s : it->second.samples) {
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto l = s.labels.find(k);
      ok = ok && l != s.labels.end() && l->second == v;
    }
    if (ok) out.push_back(s);
  }
  return out;
}

double Exposition::value(const std::string& name,
                         const std::map<std::string, std::string>& match) const {
  const std::vector<Sample> found = find(name, match);
  if (found.size() != 1) {
    std::string what = name + "{";
    for (const auto& [k, v] : match) what += k + "=\"" + v + "\",";
    throw std::runtime_error(std::to_string(found.size()) + " samples of " + what +
                             "} where one was expected");
  }
  return found[0].value;
}

Exposition parse_exposition(const std::string& text) {
  if (!valid_utf8(text)) throw std::runtime_error("exposition is not valid UTF-8");
  if (text.empty() || text.back() != '\n') {
    throw std::runtime_error("exposition does not end with a newline");
  }
  Exposition x;
  std::set<std::string> typed, helped, closed;  // closed: families whose samples ended
  std::set<std::string> series;
  std::string current;  // the family of the previous sample
  size_t no = 0;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    ++no;
    if (line.empty()) fail(no, line, "blank line");
    if (line.find('\r') != std::string::npos) fail(no, line, "carriage return");
    if (line[0] == '#') {
      static const std::regex meta(R"(# (HELP|TYPE) ([^ ]+)( (.*))?)");
      std::smatch m;
      if (line.rfind("# HELP", 0) != 0 && line.rfind("# TYPE", 0) != 0) continue;  // a comment
      if (!std::regex_match(line, m, meta)) fail(no, line, "malformed HELP or TYPE");
      const std::string name = m[2];
      if (!is_metric_name(name)) fail(no, line, "bad metric name '" + name + "'");
      Family& f = x.families[name];
      if (m[1] == "HELP") {
        if (!helped.insert(name).second) fail(no, line, "second HELP for " + name);
        f.help = unescape_help(no, line, m[4].str());
      } else {
        static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary",
                                                    "untyped"};
        if (!types.count(m[4])) fail(no, line, "unknown type '" + m[4].str() + "'");
        if (!typed.insert(name).second) fail(no, line, "second TYPE for " + name);
        if (!f.samples.empty()) fail(no, line, "TYPE after the first sample of " + name);
        f.type = m[4];
      }
      continue;
    }
    Sample s = parse_sample(no, line);
    // Our families are neither histograms nor summaries: a sample's family
    // is its own name.
    if (!typed.count(s.name)) fail(no, line, "sample of " + s.name + " without a TYPE");
    if (!helped.count(s.name)) fail(no, line, "sample of " + s.name + " without a HELP");
    if (s.name != current) {
      if (closed.count(s.name)) fail(no, line, "samples of " + s.name + " are not contiguous");
      if (!current.empty()) closed.insert(current);
      current = s.name;
    }
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += '\x1f' + k + '\x1e' + v;
    if (!series.insert(key).second) fail(no, line, "series repeated");
    Family& f = x.families[s.name];
    if (f.type == "counter") {
      if (s.name.size() < 6 || s.name.compare(s.name.size() - 6, 6, "_total") != 0)
        fail(no, line, "counter without _total");
      if (!(s.value >= 0) || !std::isfinite(s.value)) fail(no, line, "counter value not >= 0");
    }
    f.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : x.families) {
    if (!typed.count(name) || !helped.count(name))
      throw std::runtime_error("family " + name + " lacks a HELP or a TYPE");
  }
  return x;
}

}  // namespace sluice::metrics_test
