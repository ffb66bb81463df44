import Foundation

/// HTTP dates (RFC 9110 §5.6.7), parsed by hand: a formatter per response costs more CPU than the rest of a small
/// download. Accepts the preferred IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) and the two obsolete forms
/// recipients must accept: RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`).
enum HTTPDate {
    private static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    static func parse(_ text: String) -> Date? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: true)
        let day: Int?
        let month: Int?
        var year: Int?
        let time: Substring
        switch parts.count {
        case 6 where parts[0].hasSuffix(",") && parts[5] == "GMT":  // IMF-fixdate
            day = Int(parts[1])
            month = self.month(parts[2])
            year = Int(parts[3])
            time = parts[4]
        case 4 where parts[0].hasSuffix(",") && parts[3] == "GMT":  // RFC 850
            let date = parts[1].split(separator: "-")
            guard date.count == 3 else { return nil }
            day = Int(date[0])
            month = self.month(date[1])
            year = Int(date[2]).map { $0 < 70 ? 2000 + $0 : ($0 < 100 ? 1900 + $0 : $0) }
            time = parts[2]
        case 5 where !parts[0].hasSuffix(","):  // asctime
            month = self.month(parts[1])
            day = Int(parts[2])
            time = parts[3]
            year = Int(parts[4])
        default:
            return nil
        }
        let clock = time.split(separator: ":")
        guard let day, let month, let year, (1...31).contains(day), (1...9999).contains(year), clock.count == 3,
            clock.allSatisfy({ $0.count == 2 }), let hour = Int(clock[0]), let minute = Int(clock[1]),
            let second = Int(clock[2]), (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
        else { return nil }
        let days = self.daysSinceEpoch(year: year, month: month, day: day)
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }

    private static func month(_ text: Substring) -> Int? {
        self.months.firstIndex(of: text.lowercased()).map { $0 + 1 }
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's days_from_civil).
    private static func daysSinceEpoch(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
