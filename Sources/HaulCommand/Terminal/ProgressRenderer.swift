import Haul

/// The live display as a pure function: given what is running and the terminal's width, the exact lines to draw.
///
/// Every line fits the width (names are shortened in the middle, then the bar, speed and time left are dropped as
/// the window narrows), so the display never wraps and never garbles when redrawn in place.
struct ProgressRenderer {
    /// One running transfer.
    struct Active: Equatable {
        var name: String
        var progress: TransferProgress
    }

    /// What to draw.
    struct Snapshot {
        var active: [Active]
        var total: BatchProgress
        var elapsed: Duration
    }

    /// The terminal's width in columns.
    var width: Int
    /// The most transfer lines shown; the rest are counted on one line.
    var maximumTransferLines: Int = 8

    /// The most transfer lines a terminal of `rows` rows (when it says) shows: 8, and fewer on a short terminal, so that
    /// the display (those lines, the one that counts the rest, the total, and the line the cursor waits on) is never
    /// taller than the window. Taller, its top scrolled away and could not be redrawn: each frame left lines behind.
    static func transferLines(forRows rows: Int?) -> Int {
        guard let rows else { return 8 }
        return max(0, min(8, rows - 3))
    }
    /// Whether to use colour (a terminal, and `NO_COLOR` unset).
    var colors: Bool = false

    func lines(for snapshot: Snapshot) -> [String] {
        let width = max(self.width, 20)
        var lines: [String] = []
        let shown = snapshot.active.prefix(self.maximumTransferLines)
        for active in shown { lines.append(self.transferLine(active, width: width)) }
        if snapshot.active.count > shown.count {
            lines.append(Self.fit("  … and \(snapshot.active.count - shown.count) more running", width: width))
        }
        lines.append(self.totalLine(snapshot.total, width: width))
        return lines
    }

    /// `name  [=====>     ]  45%  1.20 MiB/3.00 MiB  2.10 MiB/s  3.0s`
    func transferLine(_ active: Active, width: Int) -> String {
        let progress = active.progress
        let percent =
            progress.fractionCompleted.map { String(Int(($0 * 100).rounded(.down))).leftPadded(to: 3) + "%" } ?? "   ?"
        let bytes =
            progress.expectedBytes.map { "\(Formatting.bytes(progress.receivedBytes))/\(Formatting.bytes($0))" }
            ?? Formatting.bytes(progress.receivedBytes)
        let speed = Formatting.speed(progress.bytesPerSecond)
        let left = progress.estimatedTimeRemaining.map { Formatting.duration($0) } ?? ""
        return self.layout(
            name: active.name,
            fraction: progress.fractionCompleted,
            fields: [percent, bytes, speed, left],
            width: width
        )
    }

    /// `total [====>      ]  37%  12/200 files, 3 failed  45.2 MiB/120 MiB  80.1 MiB/s  1m05s`
    func totalLine(_ total: BatchProgress, width: Int) -> String {
        let done = total.completedFiles + total.skippedFiles
        var files = "\(done)/\(total.totalFiles) files"
        if total.failedFiles > 0 { files += ", \(total.failedFiles) failed" }
        let bytes =
            total.expectedBytes.map { "\(Formatting.bytes(total.transferredBytes))/\(Formatting.bytes($0))" }
            ?? "\(Formatting.bytes(total.transferredBytes))/?"
        let percent = String(Int((total.fractionCompleted * 100).rounded(.down))).leftPadded(to: 3) + "%"
        let left = total.estimatedTimeRemaining.map { Formatting.duration($0) } ?? ""
        let line = self.layout(
            name: "total",
            fraction: total.fractionCompleted,
            fields: [percent, files, bytes, Formatting.speed(total.bytesPerSecond), left],
            width: width
        )
        return self.colors ? "\u{1B}[1m" + line + "\u{1B}[0m" : line
    }

    /// Lays out a name, a bar and fields in `width` columns: fields are dropped from the right, then the bar, then
    /// the name is shortened, until it fits.
    private func layout(name: String, fraction: Double?, fields: [String], width: Int) -> String {
        var fields = fields.filter { !$0.isEmpty }
        while true {
            let tail = fields.joined(separator: "  ")
            let nameWidth = min(max(12, width / 4), 32)
            let barWidth = width - nameWidth - tail.columns - 6
            if barWidth >= 10 {
                // The same bar width on every line when the window allows, so the bars line up.
                let bar = Self.bar(
                    fraction: fraction,
                    width: min(barWidth, Self.barWidth(forWindow: width, nameWidth: nameWidth))
                )
                let head = Self.shorten(name, to: nameWidth).rightPadded(to: nameWidth)
                return Self.fit("\(head) \(bar)  \(tail)", width: width)
            }
            if fields.count > 2 {
                fields.removeLast()
                continue
            }
            // No room for a bar: name and the first fields only.
            let short = Self.shorten(name, to: max(8, width - tail.columns - 2))
            return Self.fit("\(short)  \(tail)", width: width)
        }
    }

    /// The bar width every line uses in a window: what is left after the name and room for the longest fields
    /// (about 56 columns), between 10 and 30.
    static func barWidth(forWindow width: Int, nameWidth: Int) -> Int {
        min(max(width - nameWidth - 62, 10), 30)
    }

    /// `[=====>    ]`, or a dotted bar when the size is unknown.
    static func bar(fraction: Double?, width: Int) -> String {
        let inner = max(width - 2, 1)
        guard let fraction else { return "[" + String(repeating: "·", count: inner) + "]" }
        let filled = Int((Double(inner) * min(max(fraction, 0), 1)).rounded(.down))
        if filled >= inner { return "[" + String(repeating: "=", count: inner) + "]" }
        return "[" + String(repeating: "=", count: filled) + ">" + String(repeating: " ", count: inner - filled - 1)
            + "]"
    }

    /// Shortens in the middle with `…` to `width` columns, keeping the start and the extension-bearing end.
    static func shorten(_ text: String, to width: Int) -> String {
        guard text.columns > width else { return text }
        guard width > 3 else { return self.fit(text, width: width) }
        let keep = width - 1
        let head = self.fit(text, width: keep / 2)
        var tail = Substring(text)
        while tail.columns > keep - head.columns { tail = tail.dropFirst() }
        return head + "…" + tail
    }

    /// Cuts a line to `width` columns.
    static func fit(_ line: String, width: Int) -> String {
        guard line.columns > width else { return line }
        var result = ""
        var used = 0
        for character in line {
            let columns = character.columns
            if used + columns > width { break }
            result.append(character)
            used += columns
        }
        return result
    }
}

extension StringProtocol {
    /// The columns the text takes in a terminal: wide (East Asian and emoji) characters take two.
    var columns: Int { self.reduce(0) { $0 + $1.columns } }
}

extension Character {
    /// The columns this character takes in a terminal: 2 for wide characters, 0 for controls, else 1.
    var columns: Int {
        guard let scalar = self.unicodeScalars.first else { return 0 }
        switch scalar.value {
        case 0..<0x20, 0x7F: return 0
        case 0x1100...0x115F, 0x2E80...0xA4CF, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60,
            0xFFE0...0xFFE6, 0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD:
            return 2
        default: return 1
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        self.columns >= width ? self : String(repeating: " ", count: width - self.columns) + self
    }

    fileprivate func rightPadded(to width: Int) -> String {
        self.columns >= width ? self : self + String(repeating: " ", count: width - self.columns)
    }
}
