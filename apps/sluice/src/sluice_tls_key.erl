%% @doc Whether the server's certificates can sign a TLS 1.3 handshake
%% with the signature schemes the listener offers: checked once, at
%% start, from the certificates alone (no handshake is run).
%%
%% A TLS 1.3 server signs its handshake with one of the schemes it offers
%% (its `signature_algs'), and each scheme names the kind of key, and for
%% ECDSA the curve, it signs with (RFC 8446, 4.2.3): ECDSA only on
%% secp256r1, secp384r1 and secp521r1 (brainpool curves on an ssl that
%% lists their schemes), RSA with the rsa_pss_* schemes, EdDSA, and no DSA
%% at all. A certificate whose key fits none of them cannot be used: ssl
%% fails every TLS 1.3 handshake with `insufficient_security'
%% (no_suitable_signature_algorithm), and it does not fall back to TLS
%% 1.2 for a client that offers both. public_key:pkix_test_data/1 makes
%% such a key by default on OTP 25 (ECDSA on the first curve
%% crypto:ec_curves/0 lists, secp160k1 on the OTP 25 and OpenSSL here): the
%% certificate passed every other check at start and no client could
%% connect. TLS 1.2 alone (`{versions, ['tlsv1.2']}')
%% does not sign with these schemes (the curve must be one the client
%% offers instead, which varies by client): not checked.
%%
%% A server with several certificates (`certs_keys') is refused only when
%% the one ssl signs a TLS 1.3 handshake with cannot (a second
%% certificate for TLS 1.2 clients is legitimate). That is not any of
%% them that can: ssl 10.8 takes the first in its own order and fails if
%% its key cannot sign (taken/1). Each host of `sni_hosts' is a server of
%% its own: its options are what ssl makes of them over the listener's
%% (ssl:handle_options/3, as ssl does when the client names the host),
%% checked the same way.
%% @private
-module(sluice_tls_key).

-export([check/1]).

-include_lib("public_key/include/public_key.hrl").

%% What check/1 refuses: a certificate's key, as `{ecdsa, Curve}',
%% `dsa', `rsa', `rsa_pss', `ed25519' or `ed448'.
-type key() :: {ecdsa, atom()} | dsa | rsa | rsa_pss | ed25519 | ed448.
%% A server with one certificate: its key. With several (certs_keys):
%% the key ssl would sign with (taken/1) and every certificate's key, in
%% certs_keys' order.
-type refusal() :: {no_tls13_signature, key()}
                 | {no_tls13_signature, key(), [key(), ...]}.
-type error() :: refusal() | {sni_hosts, string(), refusal()}.

-export_type([key/0, refusal/0]).

%% @doc `ok', or `{error, {no_tls13_signature, Key}}' when `Ssl' (the
%% server options as ssl resolved them: ssl:handle_options/2's map, with
%% `versions' as protocol tuples and `signature_algs' as it will offer
%% them) offers TLS 1.3 and none of its schemes signs with the key of its
%% certificate (with several, `certs_keys', the one ssl signs with:
%% `{no_tls13_signature, Key, Keys}'); then the same for each host of its
%% `sni_hosts' (the host's options over the listener's, as ssl builds them
%% when a client names it), `{error, {sni_hosts, Host, Refusal}}' for the
%% first that cannot. Anything this cannot read (a
%% certificate that cannot be read or decoded, a key of another kind, a
%% curve without a name, options of another shape) passes: ssl says the
%% rest.
-spec check(map()) -> ok | {error, error()}.
check(Ssl) ->
    case check_server(Ssl) of
        ok -> check_hosts(maps:get(sni_hosts, Ssl, []), Ssl);
        Error -> Error
    end.

check_server(Ssl) ->
    case certificates(Ssl) of
        [] -> ok;
        Certs -> signs(Ssl, [key(C) || C <- Certs])
    end.

check_hosts([{Host, HostOpts} | Rest], Ssl) when is_list(HostOpts) ->
    case host_options(HostOpts, Ssl) of
        {ok, HostSsl} ->
            case check_server(HostSsl) of
                ok -> check_hosts(Rest, Ssl);
                {error, Why} -> {error, {sni_hosts, Host, Why}}
            end;
        unknown ->
            check_hosts(Rest, Ssl)
    end;
check_hosts([_ | Rest], Ssl) ->
    check_hosts(Rest, Ssl);
check_hosts(_End, _Ssl) ->
    ok.

%% ssl_gen_statem:update_ssl_options_from_sni/2's call (less its filter of
%% options for other versions, none of which this check reads).
host_options(HostOpts, Ssl) ->
    try ssl:handle_options(HostOpts, server, Ssl) of
        HostSsl when is_map(HostSsl) -> {ok, HostSsl};
        _ -> unknown
    catch _:_ -> unknown
    end.

signs(#{versions := Versions, signature_algs := Schemes}, Keys)
  when is_list(Versions), is_list(Schemes) ->
    case lists:member({3, 4}, Versions) andalso not lists:member(unknown, Keys) of
        false -> ok;
        true -> signs_tls13(Schemes, Keys)
    end;
signs(_Ssl, _Keys) ->
    ok.

signs_tls13(Schemes, [Key]) ->
    case signs_with_any(Schemes, Key) of
        true -> ok;
        false -> {error, {no_tls13_signature, Key}}
    end;
signs_tls13(Schemes, Keys) ->
    case taken(Keys) of
        {ok, Taken} ->
            case signs_with_any(Schemes, Taken) of
                true -> ok;
                false -> {error, {no_tls13_signature, Taken, Keys}}
            end;
        unknown ->
            case lists:any(fun(Key) -> signs_with_any(Schemes, Key) end, Keys) of
                true -> ok;
                false -> {error, {no_tls13_signature, hd(Keys), Keys}}
            end
    end.

signs_with_any(Schemes, Key) ->
    lists:any(fun(S) -> signs_with(S, Key) end, Schemes).

%% Which of several certificates a TLS 1.3 handshake signs with. ssl 10.8
%% (OTP 25) does not look for one whose key can sign: it takes the first
%% in its own order (ssl_certificate:available_cert_key_pairs/2 over
%% ssl_config's groups: EdDSA, then ECDSA by its list of curves, largest
%% first, then RSASSA-PSS, then RSA; never DSA, nor an ECDSA curve not in
%% the list) and fails the handshake if that key cannot sign, however
%% good the next one (erlang/otp#10915: secp256k1 beside P-256, or beside
%% RSA, failed every TLS 1.3 handshake here; an ssl with
%% erlang/otp#10924 would take the P-256 one, and this is then stricter
%% than it). The order's curve list is ssl's tls_v1:ecc_curves/1 (not a
%% documented function): if it cannot be read, `unknown', and the rule
%% is then that one of the keys must sign. With no key ssl would take
%% (all DSA), the first is named: no TLS 1.3 handshake can succeed.
taken(Keys) ->
    try
        Curves = tls_v1:ecc_curves(all),
        lists:keysort(1, [{R, K} || K <- Keys, (R = rank(K, Curves)) =/= none])
    of
        [{_, Taken} | _] -> {ok, Taken};
        [] -> {ok, hd(Keys)}
    catch _:_ -> unknown
    end.

rank(ed25519, _Curves) -> {0, 0};
rank(ed448, _Curves) -> {0, 1};
rank({ecdsa, Curve}, Curves) ->
    case lists:member(Curve, Curves) of
        true -> {1, length(lists:takewhile(fun(C) -> C =/= Curve end, Curves))};
        false -> none
    end;
rank(rsa_pss, _Curves) -> {2, 0};
rank(rsa, _Curves) -> {3, 0};
rank(_Dsa, _Curves) -> none.

%% The server's certificates as ssl_config:init/2 takes them from its
%% options: `certs_keys' if given (then `cert' and `certfile' are not
%% used), else `cert' if given, else the first of `certfile'. Each decoded,
%% or `unknown'.
certificates(#{certs_keys := CertsKeys}) when is_list(CertsKeys) ->
    [certificate(CertKey) || CertKey <- CertsKeys];
certificates(#{cert := Cert} = Ssl) when Cert =/= undefined ->
    [certificate(maps:with([cert], Ssl))];
certificates(#{certfile := File}) when File =/= <<>>, File =/= "" ->
    [certificate(#{certfile => File})];
certificates(_NoCertificate) ->
    [].

certificate(#{cert := [Der | _]}) -> decode(Der);
certificate(#{cert := Der}) -> decode(Der);
certificate(#{certfile := File}) ->
    try {ok, Bin} = file:read_file(File),
         [Der | _] = [D || {'Certificate', D, not_encrypted} <- public_key:pem_decode(Bin)],
         decode(Der)
    catch _:_ -> unknown
    end;
certificate(_) ->
    unknown.

decode(Der) when is_binary(Der) ->
    try public_key:pkix_decode_cert(Der, otp)
    catch _:_ -> unknown
    end;
decode(_) ->
    unknown.

key(#'OTPCertificate'{tbsCertificate = #'OTPTBSCertificate'{
                                          subjectPublicKeyInfo = #'OTPSubjectPublicKeyInfo'{
                                                                    algorithm = Alg}}}) ->
    case Alg of
        #'PublicKeyAlgorithm'{algorithm = ?'id-ecPublicKey', parameters = {namedCurve, Oid}} ->
            curve(Oid);
        #'PublicKeyAlgorithm'{algorithm = ?'rsaEncryption'} -> rsa;
        #'PublicKeyAlgorithm'{algorithm = ?'id-RSASSA-PSS'} -> rsa_pss;
        #'PublicKeyAlgorithm'{algorithm = ?'id-Ed25519'} -> ed25519;
        #'PublicKeyAlgorithm'{algorithm = ?'id-Ed448'} -> ed448;
        #'PublicKeyAlgorithm'{algorithm = ?'id-dsa'} -> dsa;
        _ -> unknown
    end;
key(_) ->
    unknown.

%% The curve's name as ssl's schemes spell it. public_key's table of
%% names (not a documented function: anything it does not answer is a
%% curve this check leaves alone).
curve(Oid) ->
    try pubkey_cert_records:namedCurves(Oid) of
        Name when is_atom(Name), Name =/= undefined -> {ecdsa, Name};
        _ -> unknown
    catch _:_ -> unknown
    end.

%% Whether the TLS 1.3 scheme S signs with Key. The TLS 1.2 pairs
%% (`{sha256, ecdsa}') are not TLS 1.3 schemes.
signs_with(S, Key) when is_atom(S) ->
    Name = atom_to_list(S),
    lists:any(fun(Prefix) -> lists:prefix(Prefix, Name) end, prefixes(Key));
signs_with(_S, _Key) ->
    false.

%% ecdsa_secp256r1_sha256, ecdsa_brainpoolP256r1tls13_sha256 (RFC 8734).
prefixes({ecdsa, Curve}) ->
    C = atom_to_list(Curve),
    ["ecdsa_" ++ C ++ "_", "ecdsa_" ++ C ++ "tls13_"];
prefixes(rsa) -> ["rsa_pss_rsae_"];
prefixes(rsa_pss) -> ["rsa_pss_pss_"];
prefixes(ed25519) -> ["eddsa_ed25519"];
prefixes(ed448) -> ["eddsa_ed448"];
prefixes(dsa) -> [].
