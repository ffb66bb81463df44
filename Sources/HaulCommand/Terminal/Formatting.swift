import Foundation

/// Human forms of sizes, speeds and durations: pure, so tests can pin the exact text.
enum Formatting {
    /// `0 B`, `999 B`, `1.0 KiB`, `12.3 MiB`, `1.50 GiB`.
    static func bytes(_ count: Int64) -> String {
        guard count >= 1024 else { return "\(count) B" }
        let (value, unit) = self.scaled(count)
        return "\(self.fixed(value, digits: self.digits(for: value))) \(unit)"
    }

    /// `count` in the largest binary unit it reaches (up to PiB).
    static func scaled(_ count: Int64) -> (value: Double, unit: String) {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return (value, units[unit])
    }

    /// Three significant digits: `1.50`, `12.3`, `123`.
    static func digits(for value: Double) -> Int { value >= 100 ? 0 : (value >= 10 ? 1 : 2) }

    /// `value` (not negative) with `digits` decimals (0 to 2), rounded to the nearest, halves to even, as
    /// `String(format: "%.2f")` gives it, without its cost: a locale and a C format per call were half of the time
    /// `haul get` took to print a line per file.
    static func fixed(_ value: Double, digits: Int) -> String {
        let scale = digits == 0 ? 1.0 : (digits == 1 ? 10.0 : 100.0)
        let scaled = Int64((value * scale).rounded(.toNearestOrEven))
        guard digits > 0 else { return String(scaled) }
        let whole = scaled / Int64(scale)
        let fraction = String(scaled % Int64(scale))
        let padding = String(repeating: "0", count: digits - fraction.count)
        return "\(whole).\(padding)\(fraction)"
    }

    /// `1 file`, `2 files`: a count and its noun (`noun` in the singular, its plural with an `s`).
    static func count(_ count: Int, _ noun: String) -> String {
        count == 1 ? "1 \(noun)" : "\(count) \(noun)s"
    }

    /// `3.2 MiB/s`.
    static func speed(_ bytesPerSecond: Double) -> String {
        self.bytes(Int64(max(0, bytesPerSecond))) + "/s"
    }

    /// `0.4s`, `12s`, `3m05s`, `2h07m`.
    static func duration(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        if seconds < 10 { return String(format: "%.1fs", seconds) }
        let whole = Int(seconds.rounded())
        if whole < 60 { return "\(whole)s" }
        if whole < 3600 { return String(format: "%dm%02ds", whole / 60, whole % 60) }
        return String(format: "%dh%02dm", whole / 3600, (whole % 3600) / 60)
    }
}
