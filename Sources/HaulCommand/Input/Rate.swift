/// A rate in bytes per second as people write it: `500K`, `2M`, `1.5G`, `800` (bytes). K, M and G are 1024-based,
/// as in aria2c and curl; a trailing `B`, `iB` or `/s` is accepted.
enum Rate {
    static func parse(_ text: String) -> Int64? {
        var body = Substring(text.trimmingCharacters(in: .whitespaces).lowercased())
        if body.hasSuffix("/s") { body = body.dropLast(2) }
        if body.hasSuffix("ib") { body = body.dropLast(2) } else if body.hasSuffix("b") { body = body.dropLast() }
        var multiplier: Double = 1
        switch body.last {
        case "k": multiplier = 1024
        case "m": multiplier = 1024 * 1024
        case "g": multiplier = 1024 * 1024 * 1024
        default: break
        }
        if multiplier > 1 { body = body.dropLast() }
        guard !body.isEmpty, body.allSatisfy({ $0.isNumber || $0 == "." }), let number = Double(body), number > 0,
            number * multiplier < 1e15
        else { return nil }
        return max(1, Int64((number * multiplier).rounded()))
    }
}
