import ArgumentParser
import Foundation
import Haul

struct Remove: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rm",
        abstract: "Delete remote files, several at a time.",
        discussion: """
            Sends DELETE to each URL. 200, 202 and 204 succeed; 404 fails the item as not found unless --missing-ok; \
            other statuses fail it with the status; only transient failures (503, 429, timeouts, resets) are retried. \
            URLs come from the command line and from an input file (-i FILE, - for standard input) in aria2c's \
            format, where the only option is header=Name: value.

            Exit codes: 0 every file deleted; 1 at least one failed or was cancelled; 64 bad usage or invalid input \
            (nothing was deleted); 130 interrupted by SIGINT or SIGTERM.
            """
    )

    @Argument(help: "The URLs to delete (http or https).")
    var urls: [String] = []

    @Option(
        name: [.customShort("i"), .long],
        help: "Read URLs (and header= options) from FILE (- for standard input)."
    )
    var inputFile: String?

    @Flag(name: .long, help: "Count 404 Not Found as success (the file is gone either way).")
    var missingOK = false

    @OptionGroup var options: TransferOptions

    @OptionGroup var state: StateOptions

    func validate() throws {
        guard !self.urls.isEmpty || self.inputFile != nil else {
            throw ValidationError("Give at least one URL, or an input file with -i.")
        }
        try InputFileParser.validateArguments(self.urls)
    }

    func run() async throws {
        let input = try self.inputFile.map {
            try CheckedInput.open($0) { item in
                item.outputName != nil || item.directory != nil || item.checksum != nil
                    ? "haul rm takes only header= options" : nil
            }
        }
        let headers = self.options.parsedHeaders
        let missingOK = self.missingOK
        func request(_ url: URL, _ extra: [(name: String, value: String)] = []) -> TransferRequest {
            let (url, headers) = URLCredentials.apply(to: url, headers: headers + extra)
            return .delete(url, headers: headers, treatsNotFoundAsSuccess: missingOK)
        }
        let requests = self.urls.map { request(InputFileParser.parse($0.trimmingWhitespace())!) }
        let configuration = self.options.configuration(store: try self.state.openStore())
        try await BatchRunner.run(configuration: configuration, options: self.options, requests: requests, input: input)
        {
            item in request(item.url, item.headers.map { ($0.name, $0.value) })
        }
    }
}
